// The head view of one sentence's attention: query tokens on the left, key tokens on the right,
// a line from query i to key j for each visible head h, drawn in h's colour with opacity
// maps[layer][h][i][j]. Data comes from the JSON element #attention-data; every token and sentence goes
// into the page as text (textContent, SVG text nodes), never as markup.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("attention-data").textContent);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const ROW = 22;            // px per token row
  const TOP = 30;            // px above the first row, for the column headings
  const BOX = 64;            // px of per-head weight boxes outside each token column (shown while hovering)
  const COLUMN = 150;        // px of a token column
  const GAP = 240;           // px between the two columns, where the lines run
  const LEFT_X = BOX;                        // left edge of the query column
  const RIGHT_X = BOX + COLUMN + GAP;        // left edge of the key column
  const MIN_OPACITY = 0.01;  // fainter lines are left out: invisible, and 32 heads × T² lines slow a page down
  const THUMBNAIL_PX = 80;   // longest side of a head's thumbnail heatmap

  const state = {
    view: 0,                // index into DATA.views (the attention kind)
    layer: 0,               // index into the view's layers
    visible: [],            // visible[h]: is head h drawn
    hover: null,            // null, or {side: "query" | "key", index}: the token under the pointer
  };

  const $ = (id) => document.getElementById(id);
  const svg = $("lines");

  // Colours are generated, so any head count gets distinct ones: hues step by the golden angle
  // (neighbours in head order are far apart on the colour wheel) and lightness cycles through
  // three levels, which keeps 32+ heads apart even where hues come close.
  function headColour(h) {
    const hue = (h * 137.508) % 360;
    const lightness = [42, 30, 56][h % 3];
    return `hsl(${hue.toFixed(1)}, 70%, ${lightness}%)`;
  }

  function svgElement(name, attributes) {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
    return element;
  }

  function clear(element) {
    while (element.firstChild) element.removeChild(element.firstChild);
  }

  const view = () => DATA.views[state.view];
  const layerMaps = () => view().maps[state.layer];  // [H][Tq][Tk]
  const visibleHeads = () => state.visible.flatMap((on, h) => (on ? [h] : []));
  const rowY = (i) => TOP + i * ROW + ROW / 2;

  // ------------------------------------------------------------------ controls

  function fillSelect(select, labels, chosen) {
    clear(select);
    labels.forEach((label, index) => {
      const option = document.createElement("option");
      option.value = String(index);
      option.textContent = label;
      select.appendChild(option);
    });
    select.value = String(chosen);
  }

  function buildHeadToggles() {
    const toggles = $("head-toggles");
    clear(toggles);
    state.visible.forEach((_, h) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "head";
      button.dataset.head = String(h);
      button.textContent = String(h + 1);
      button.title = `head ${h + 1}: show or hide`;
      button.style.setProperty("--colour", headColour(h));
      button.addEventListener("click", () => {
        state.visible[h] = !state.visible[h];
        showHeads();
      });
      toggles.appendChild(button);
    });
  }

  function setAllHeads(on) {
    state.visible = state.visible.map(() => on);
    showHeads();
  }

  // A change of the visible heads redraws what depends on them.
  function showHeads() {
    document.querySelectorAll("button.head, button.thumbnail").forEach((button) => {
      button.setAttribute("aria-pressed", String(state.visible[Number(button.dataset.head)]));
    });
    drawLines();
  }

  // ------------------------------------------------------------------ the token columns and lines

  function drawTokenColumn(group, tokens, side, x, anchor) {
    tokens.forEach((token, i) => {
      const cell = svgElement("g", {"class": "token", "data-side": side, "data-index": i});
      cell.appendChild(svgElement("rect", {"class": "token-bg", x, y: TOP + i * ROW, width: COLUMN, height: ROW}));
      const text = svgElement("text", {x: anchor === "end" ? x + COLUMN - 8 : x + 8, y: rowY(i),
                                       "text-anchor": anchor});
      text.textContent = token;
      cell.appendChild(text);
      cell.addEventListener("mouseenter", () => hover({side, index: i}, cell));
      cell.addEventListener("mouseleave", () => hover(null, null));
      group.appendChild(cell);
    });
  }

  function hover(target, cell) {
    state.hover = target;
    svg.querySelectorAll(".token.hovered").forEach((c) => c.classList.remove("hovered"));
    if (cell) cell.classList.add("hovered");
    drawLines();
  }

  // The skeleton of the view (headings, tokens, empty groups for lines and boxes), per kind.
  function drawView() {
    const v = view();
    const rows = Math.max(v.queries.length, v.keys.length);
    clear(svg);
    svg.setAttribute("width", 2 * BOX + 2 * COLUMN + GAP);
    svg.setAttribute("height", TOP + rows * ROW + 4);
    svg.dataset.minOpacity = String(MIN_OPACITY);
    const headings = [[v.query_name, LEFT_X], [v.key_name, RIGHT_X]];
    for (const [name, x] of headings) {
      const heading = svgElement("text", {"class": "heading", x: x + 8, y: TOP / 2});
      heading.textContent = name;
      svg.appendChild(heading);
    }
    svg.appendChild(svgElement("g", {id: "line-group"}));
    svg.appendChild(svgElement("g", {id: "box-group"}));
    const tokens = svgElement("g", {id: "token-group"});
    drawTokenColumn(tokens, v.queries, "query", LEFT_X, "end");
    drawTokenColumn(tokens, v.keys, "key", RIGHT_X, "start");
    svg.appendChild(tokens);
    state.hover = null;
  }

  // Lines for the visible heads. At rest: every query's lines, opacity = weight / visible heads
  // (as bertviz does, so that many heads do not saturate). Hovering a query token: only its lines,
  // opacity = its weight on each key; hovering a key token: only the lines into it, opacity = each
  // query's weight on it. While hovering, boxes beside the other column show each head's weight.
  function drawLines() {
    const lineGroup = $("line-group");
    const boxGroup = $("box-group");
    clear(lineGroup);
    clear(boxGroup);
    const maps = layerMaps();
    const heads = visibleHeads();
    const Tq = view().queries.length;
    const Tk = view().keys.length;
    const hovered = state.hover;
    const scale = hovered ? 1 : 1 / Math.max(heads.length, 1);
    const queries = hovered && hovered.side === "query" ? [hovered.index] : [...Array(Tq).keys()];
    const keys = hovered && hovered.side === "key" ? [hovered.index] : [...Array(Tk).keys()];
    const fragment = document.createDocumentFragment();
    for (const h of heads) {
      const colour = headColour(h);
      for (const i of queries) {
        for (const j of keys) {
          const opacity = maps[h][i][j] * scale;
          if (opacity < MIN_OPACITY) continue;
          fragment.appendChild(svgElement("line", {
            "class": "attention-line", "data-head": h, "data-query": i, "data-key": j,
            x1: LEFT_X + COLUMN, y1: rowY(i), x2: RIGHT_X, y2: rowY(j),
            stroke: colour, "stroke-width": 2, "stroke-opacity": opacity,
          }));
        }
      }
    }
    lineGroup.appendChild(fragment);
    if (hovered) drawWeightBoxes(boxGroup, maps, heads, hovered);
  }

  // One box per visible head beside each token of the other column, filled in proportion to the
  // weight between it and the hovered token.
  function drawWeightBoxes(group, maps, heads, hovered) {
    const fromQuery = hovered.side === "query";
    const others = fromQuery ? view().keys.length : view().queries.length;
    const x0 = fromQuery ? RIGHT_X + COLUMN : 0;
    const width = BOX / Math.max(heads.length, 1);
    heads.forEach((h, slot) => {
      for (let t = 0; t < others; t++) {
        const weight = fromQuery ? maps[h][hovered.index][t] : maps[h][t][hovered.index];
        group.appendChild(svgElement("rect", {
          "class": "weight-box", "data-head": h, "data-index": t,
          x: x0 + slot * width, y: TOP + t * ROW + 2, width, height: ROW - 4,
          fill: headColour(h), "fill-opacity": weight,
        }));
      }
    });
  }

  // ------------------------------------------------------------------ thumbnails

  // A heatmap per head of the layer (rows: queries, columns: keys), each cell the head's colour at
  // the opacity of its weight; clicking one shows that head alone.
  function drawThumbnails() {
    const v = view();
    const maps = layerMaps();
    const Tq = v.queries.length;
    const Tk = v.keys.length;
    const cell = Math.max(1, Math.floor(THUMBNAIL_PX / Math.max(Tq, Tk)));
    const container = $("thumbnails");
    clear(container);
    $("thumbnails-title").textContent =
      `${v.title}, layer ${v.layers[state.layer]}: every head (rows: ${v.query_name}; columns: ${v.key_name})`;
    maps.forEach((headMap, h) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "thumbnail";
      button.dataset.head = String(h);
      button.title = `show head ${h + 1} alone`;
      button.style.setProperty("--colour", headColour(h));
      const canvas = document.createElement("canvas");
      canvas.width = Tk * cell;
      canvas.height = Tq * cell;
      const context = canvas.getContext("2d");
      context.fillStyle = headColour(h);
      headMap.forEach((row, i) => row.forEach((weight, j) => {
        context.globalAlpha = weight;
        context.fillRect(j * cell, i * cell, cell, cell);
      }));
      const label = document.createElement("span");
      label.textContent = `head ${h + 1}`;
      button.append(canvas, label);
      button.addEventListener("click", () => {
        state.visible = state.visible.map((_, k) => k === h);
        showHeads();
      });
      container.appendChild(button);
    });
  }

  // ------------------------------------------------------------------ wiring

  function showLayer() {
    drawThumbnails();
    showHeads();
  }

  function showKind() {
    const v = view();
    state.layer = Math.min(state.layer, v.layers.length - 1);
    fillSelect($("layer"), v.layers.map(String), state.layer);
    drawView();
    showLayer();
  }

  function start() {
    $("source").textContent = DATA.source;
    $("translation").textContent = DATA.translation;
    $("caption").textContent = DATA.caption;
    document.title = `attention: ${DATA.source}`;
    state.visible = new Array(DATA.views[0].heads).fill(true);
    fillSelect($("kind"), DATA.views.map((v) => v.title), state.view);
    $("kind").addEventListener("change", (event) => {
      state.view = Number(event.target.value);
      showKind();
    });
    $("layer").addEventListener("change", (event) => {
      state.layer = Number(event.target.value);
      showLayer();
    });
    $("all-heads").addEventListener("click", () => setAllHeads(true));
    $("no-heads").addEventListener("click", () => setAllHeads(false));
    buildHeadToggles();
    showKind();
  }

  start();
})();
