"""Layer 3, the Transformer of "Attention Is All You Need": multi-head attention (§3.2), the encoder-decoder
(§3.1), dropout, and the model's parameter and FLOP counts. Imports core and data."""
