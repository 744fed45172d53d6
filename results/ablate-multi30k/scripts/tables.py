"""Print the README's head-count table from results/ablate-multi30k/report.json."""

import json

r = json.load(open("results/ablate-multi30k/report.json"))


def stat(s):
    if not s or s.get("mean") is None:
        return "pending"
    return f"{s['mean']:.2f}" if s["n"] == 1 else f"{s['mean']:.2f} ± {s['std']:.2f}"


def p(x):
    return "—" if x is None else f"{x:.3f}"


print(
    "| h | d_k | runs | valid PPL | test BLEU | per seed (1, 2, 3) | 95% t interval over seeds | Δ vs h=8 | bootstrap p (Holm) | paired t p (Holm) | verdict |"
)
print("|---|---|---|---|---|---|---|---|---|---|---|")
for row in r["by_heads"]:
    t = row.get("seed_test") or {}
    per = row["test_bleu"].get("per_seed") or {}
    ci = row.get("test_bleu_seed_ci95")
    base = row["heads"] == 8
    if base:
        d, bp, tp, v = "baseline", "—", "—", "—"
    elif t:
        d = f"{t['mean_difference']:+.2f}"
        bp = f"{p(t['bootstrap_p'])} ({p(t['bootstrap_p_holm'])})"
        tp = "—" if t.get("t_test_p") is None else f"{p(t['t_test_p'])} ({p(t['t_test_p_holm'])})"
        v = t["verdict"]
    else:
        d = bp = tp = v = "pending"
    print(
        f"| {row['heads']} | {row['d_head']} | {row['runs_done']}/{row['runs']} | {stat(row['valid_ppl'])} | "
        f"{stat(row['test_bleu'])} | {', '.join(f'{per[k]:.2f}' for k in sorted(per)) or '—'} | "
        f"{'—' if not ci else f'[{ci[0]:.2f}, {ci[1]:.2f}]'} | {d} | {bp} | {tp} | {v} |"
    )
print()
print(r["claims"]["conclusion"])


# The convergence check beside the 2,600-update grid: seed 1 at both budgets, and the grid's seed mean.
c = json.load(open("results/ablate-multi30k/convergence/report.json"))
grid_seed1 = {run["heads"]: run for run in r["runs"] if run["seed"] == 1 and run["status"] == "done"}
grid_mean = {row["heads"]: row["test_bleu"]["mean"] for row in r["by_heads"]}
seed1_diff = {t["heads"]: t["difference"] for row in r["by_heads"] for t in row["per_seed_tests"] if t["seed"] == 1}


def ranks(values):
    order = sorted((h for h in values if values[h] is not None), key=lambda h: -values[h])
    return {h: i + 1 for i, h in enumerate(order)}


conv = {run["heads"]: run for run in c["runs"] if run["status"] == "done"}
conv_rank = ranks({h: run["test_bleu"] for h, run in conv.items()})
seed1_rank = ranks({h: run["test_bleu"] for h, run in grid_seed1.items() if h in conv})
mean_rank = ranks({h: grid_mean[h] for h in conv})
conv_tests = {row["heads"]: row["seed_test"] for row in c["by_heads"] if row.get("seed_test")}
print()
print(
    "| h | stopped at | best update | valid BLEU | test BLEU | Δ vs h=8 (p, Holm) | rank "
    "| seed 1 at 2,600: test BLEU, Δ, rank | grid mean at 2,600: test BLEU, rank |"
)
print("|---|---|---|---|---|---|---|---|---|")
for h in sorted(conv):
    run, t, g = conv[h], conv_tests.get(h), grid_seed1[h]
    d = "baseline" if h == 8 else f"{t['mean_difference']:+.2f} ({p(t['bootstrap_p'])}, {p(t['bootstrap_p_holm'])})"
    d1 = "" if h == 8 else f"{seed1_diff[h]:+.2f}, "
    print(
        f"| {h} | {run['trained_updates']:,} | {run['updates']:,} | {run['valid_bleu']:.2f} | {run['test_bleu']:.2f} | "
        f"{d} | {conv_rank[h]} | {g['test_bleu']:.2f}, {d1}{seed1_rank[h]} | {grid_mean[h]:.2f}, {mean_rank[h]} |"
    )
print()
print(c["claims"]["conclusion"])
