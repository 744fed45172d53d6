"""Layer 4, using a model: greedy and beam search over the decoder cache, sacreBLEU/chrF scoring, and a
trained run loaded from its directory (translate, evaluate on a split). Imports core, data and model."""
