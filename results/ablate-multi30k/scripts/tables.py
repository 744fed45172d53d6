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
