"""Scoring: sacreBLEU on detokenised output against the raw references, with signatures.

The same `score()` serves validation during training and `mhatrain eval`.
"""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF


def bleu_score(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """Cased, detokenised BLEU with the 13a tokenizer (sacreBLEU's default): (score, signature)."""
    metric = BLEU()
    return metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature())


def score(hypotheses: list[str], references: list[str]) -> dict:
    """BLEU, chrF and a lowercased BLEU for comparison with papers that lowercase and tokenize."""
    bleu, bleu_signature = bleu_score(hypotheses, references)
    chrf_metric = CHRF()
    chrf = chrf_metric.corpus_score(hypotheses, [references]).score
    lower_metric = BLEU(lowercase=True, tokenize="13a")
    lower = lower_metric.corpus_score(hypotheses, [references]).score
    return {
        "bleu": round(bleu, 2),
        "bleu_signature": bleu_signature,
        "chrf": round(chrf, 2),
        "chrf_signature": str(chrf_metric.get_signature()),
        "bleu_lowercased_tokenized": round(lower, 2),
        "bleu_lowercased_tokenized_signature": str(lower_metric.get_signature()),
        "sentences": len(hypotheses),
    }
