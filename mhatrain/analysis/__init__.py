"""Layer 6, looking inside the heads of a trained run: per-sentence attention maps (PNG, JSON, the HTML
page), head importance and pruning, head roles over a corpus, and their figures."""
