"""`mhatrain bench`: our code against named peers, measured in the same process and run.

    attention   forward + backward of MultiHeadAttention vs nn.MultiheadAttention and the article's loop
    train       training-step tokens/s vs nn.Transformer and MarianMT; FLOP/s against the matmul peak
    decode      sentences/s, greedy and beam 4: cached vs uncached search vs Hugging Face generate()

Each bench checks that the peers compute the same thing (where they can), warms every peer up,
times them alternately, measures each peer's peak memory in a fresh process, and reports medians,
quartiles, throughput, the ratio peer time / our time and PASS/MISS against the issue's targets
(not at --quick's toy sizes, which they are not set for).
Modules: options (what to run), cli_options (how the command declares and parses them), runner (the
benches in order, reported), inputs (batches and sentences), peers (the models we compare against),
timing (warm-up, alternation, order statistics), memory (peak memory in a fresh process), measure (one
case: both of those for every peer), report (tables, JSON, Markdown); and one module per bench, named
after it (attention_bench, train_bench, decode_bench).
"""
