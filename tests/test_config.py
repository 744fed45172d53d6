"""Config loading: defaults, overrides, and one clear error per kind of bad value."""

from __future__ import annotations

import pytest
import yaml

from mhatrain.core.config import Config, accum_steps_for, apply_override, config_from_dict, dump_config, load_config
from mhatrain.core.errors import ConfigError

from .conftest import ROOT, TINY


def write(tmp_path, data) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("name", ["tiny", "multi30k", "paper-base"])
def test_shipped_configs_load(name):
    cfg = load_config(ROOT / "configs" / f"{name}.yaml")
    assert cfg.model.d_model % cfg.model.n_heads == 0


def test_multi30k_config_allows_every_ablation_head_count():
    cfg = load_config(ROOT / "configs" / "multi30k.yaml")
    assert (cfg.model.n_encoder_layers, cfg.model.n_decoder_layers) == (6, 6)
    assert all(cfg.model.d_model % h == 0 for h in (1, 4, 8, 16, 32))


def test_paper_base_matches_the_paper():
    cfg = load_config(ROOT / "configs" / "paper-base.yaml")
    m, t = cfg.model, cfg.train
    assert (m.d_model, m.d_ff, m.n_heads, m.n_encoder_layers, m.dropout, m.norm) == (512, 2048, 8, 6, 0.1, "post")
    assert (t.adam_beta1, t.adam_beta2, t.adam_eps, t.warmup_steps, t.label_smoothing) == (0.9, 0.98, 1e-9, 4000, 0.1)
    assert (cfg.decode.beam, cfg.decode.alpha) == (4, 0.6)


def test_paper_base_keeps_25k_tokens_per_update_at_any_number_of_gpus():
    t = load_config(ROOT / "configs" / "paper-base.yaml").train
    assert [accum_steps_for(t, world) for world in (1, 2)] == [2, 1]  # 25,000 tokens either way
    assert (t.keep_checkpoints, t.checkpoint_every_minutes) == (5, 10)
    t.max_tokens = 6250
    assert [accum_steps_for(t, world) for world in (1, 2, 4, 8)] == [4, 2, 1, 1]
    t.tokens_per_update = 0
    assert accum_steps_for(t, 4) == t.accum_steps == 1


def test_overrides_are_typed_and_applied():
    cfg = load_config(TINY, ["train.max_tokens=1024", "model.dropout=0.3", "train.lr_factor=2", "data.local_dir=null"])
    assert cfg.train.max_tokens == 1024 and cfg.model.dropout == 0.3
    assert isinstance(cfg.train.lr_factor, float) and cfg.train.lr_factor == 2.0
    assert cfg.data.local_dir is None


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(TINY, ["model.n_heads=8"])
    dump_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"modle": {}}, "unknown section 'modle' (did you mean 'model'?)"),
        ({"model": {"n_head": 4}}, "unknown key 'model.n_head' (did you mean 'n_heads'?)"),
        ({"model": {"d_model": "big"}}, "'model.d_model' must be int, got str"),
        ({"model": {"d_model": 2.5}}, "'model.d_model' must be int, got float"),
        ({"train": {"valid_bleu": "yes"}}, "'train.valid_bleu' must be bool"),
        ({"model": {"d_model": 100, "n_heads": 8}}, "'model.n_heads' must divide model.d_model=100, got 8"),
        ({"model": {"d_head": 0}}, "'model.d_head' must be positive (or null for d_model / n_heads), got 0"),
        ({"model": {"dropout": 1.0}}, "'model.dropout' must be in [0, 1), got 1.0"),
        ({"model": {"dropout": -0.1}}, "'model.dropout' must be in [0, 1)"),
        ({"model": {"d_ff": 0}}, "'model.d_ff' must be positive, got 0"),
        ({"train": {"max_tokens": -5}}, "'train.max_tokens' must be positive, got -5"),
        ({"model": {"norm": "middle"}}, "'model.norm' must be one of post, pre, got 'middle'"),
        ({"data": {"local_dir": "/no/such/dir"}}, "'data.local_dir' is not a directory: /no/such/dir"),
        ({"data": {"src_lang": "de"}}, "'data.tgt_lang' must differ from data.src_lang ('de')"),
        ({"train": {"device": "gpu"}}, "'train.device' must be auto, cpu, cuda or cuda:N"),
        ({"model": "wide"}, "section 'model' must be a mapping, got str"),
        (
            {"train": {"tokens_per_update": 25000, "accum_steps": 2}},
            "'train.tokens_per_update' and train.accum_steps=2 both set the batches per update",
        ),
        ({"train": {"tokens_per_update": 1000, "max_tokens": 4096}}, "'train.tokens_per_update' must be at least"),
        ({"train": {"keep_checkpoints": -1}}, "'train.keep_checkpoints' must not be negative"),
        ({"train": {"checkpoint_every_minutes": -1}}, "'train.checkpoint_every_minutes' must not be negative"),
        ({"model": {"head_gates": {"l0": -1}}}, "'model.head_gates.l0' must not be negative, got -1.0"),
        ({"model": {"head_gates": {"temperature": 0}}}, "'model.head_gates.temperature' must be positive, got 0.0"),
        (
            {"model": {"head_gates": {"temprature": 1}}},
            "unknown key 'model.head_gates.temprature' (did you mean 'temperature'?)",
        ),
        (
            {"model": {"head_gates": {"stretch": [0, 1.1]}}},
            "'model.head_gates.stretch' must be [γ, ζ] with γ < 0 and ζ > 1",
        ),
        ({"model": {"head_gates": {"stretch": [-0.1]}}}, "'model.head_gates.stretch' must be [γ, ζ]"),
        ({"model": {"head_gates": {"stretch": "wide"}}}, "'model.head_gates.stretch' must be a list of float, got str"),
        (
            {"model": {"head_gates": {"kinds": ["cross", "encoder"]}}},
            "'model.head_gates.kinds[1]' must be one of enc_self, dec_self, cross, got 'encoder'",
        ),
        (
            {"model": {"head_gates": {"kinds": ["cross", "cross"]}}},
            "'model.head_gates.kinds' must name each gated kind once",
        ),
        ({"model": {"head_gates": {"lr_scale": 0}}}, "'model.head_gates.lr_scale' must be a positive number, got 0.0"),
        (
            {"model": {"head_gates": "on"}},
            "'model.head_gates' must be a mapping of l0, temperature, stretch, kinds, lr_scale, got str",
        ),
        (
            {"model": {"heads_per_layer": {"cross": [8, 8]}}},
            "'model.heads_per_layer.cross' must have one count per layer (model.n_decoder_layers=6), got 2",
        ),
        ({"model": {"heads_per_layer": {"enc_self": [8, 8, 8, 8, 8, -1]}}}, "must not hold a negative head count"),
    ],
)
def test_bad_values_name_key_and_file(tmp_path, data, expected):
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert expected in str(err.value)
    assert path in str(err.value)
    assert "\n" not in str(err.value)


def test_yaml_syntax_error_names_line(tmp_path):
    path = write(tmp_path, "model:\n  d_model: [512\n")
    with pytest.raises(ConfigError, match=r"c\.yaml at line \d+, column \d+: invalid YAML"):
        load_config(path)


def test_missing_and_non_mapping_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"))


@pytest.mark.parametrize(
    "item, expected",
    [
        ("train.max_tokens", "expected section.key=value"),
        ("max_tokens=5", "expected section.key=value"),
        ("train.max_token=5", "unknown key 'train.max_token' (did you mean 'max_tokens'?)"),
        ("training.seed=1", "unknown section 'training'"),
        ("train.seed=abc", "'train.seed' must be int, got str"),
        ("model.head_gates.l00=1", "unknown key 'model.head_gates.l00' (did you mean 'l0'?)"),
        ("model.d_model.l0=1", "'model.d_model' is not a mapping: expected model.d_model=value"),
        ("model.head_gate.l0=1", "unknown key 'model.head_gate' (did you mean 'head_gates'?)"),
        ("model.head_gates.l0.x=1", "expected section.key=value"),
    ],
)
def test_bad_overrides(item, expected):
    with pytest.raises(ConfigError) as err:
        apply_override(Config(), item)
    assert expected in str(err.value) and f"--set {item}" in str(err.value) and "\n" not in str(err.value)


def test_override_validation_runs_after_overrides():
    with pytest.raises(ConfigError, match="'model.n_heads' must divide model.d_model=64, got 5"):
        load_config(TINY, ["model.n_heads=5"])


def test_config_from_dict_validates():
    with pytest.raises(ConfigError, match="must be positive"):
        config_from_dict({"model": {"n_encoder_layers": 0}})


@pytest.mark.parametrize("text", ["1e-9", "1.0e-9", "'1e-9'", "+1E-9"])
def test_float_keys_accept_numbers_that_yaml_reads_as_strings(tmp_path, text):
    """YAML 1.1 reads 1e-9 (no dot) as a string; the paper's values are written so."""
    path = write(tmp_path, {"train": {"lr_factor": 2}})
    with open(path, "a") as f:
        f.write(f"  adam_eps: {text}\n")
    assert load_config(path, check_paths=False).train.adam_eps == 1e-9
    assert load_config(TINY, [f"train.adam_eps={text}"]).train.adam_eps == 1e-9


def test_a_string_that_is_no_number_is_still_refused_for_a_float_key():
    with pytest.raises(ConfigError, match="'train.adam_eps' must be float, got str 'tiny'"):
        load_config(TINY, ["train.adam_eps=tiny"])


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "nan", "1e999"])
def test_float_keys_must_be_finite(value):
    item = f"train.lr_factor={value}"
    with pytest.raises(ConfigError) as err:
        load_config(TINY, [item])
    assert str(err.value).startswith(f"--set {item}: 'train.lr_factor' must be a finite number, got ")


def test_a_non_finite_float_in_a_file_names_the_file(tmp_path):
    path = write(tmp_path, {"model": {"dropout": float("inf")}})
    with pytest.raises(ConfigError, match=r"c\.yaml: 'model.dropout' must be a finite number, got inf"):
        load_config(path)


@pytest.mark.parametrize(
    "item, key",
    [
        ("train.lr_factor=-1", "train.lr_factor"),
        ("model.n_heads=3", "model.n_heads"),
        ("model.dropout=1.5", "model.dropout"),
        ("data.vocab_size=8", "data.vocab_size"),
    ],
)
def test_a_bad_set_value_is_blamed_on_the_set_not_on_the_file(item, key):
    with pytest.raises(ConfigError) as err:
        load_config(TINY, [item])
    assert str(err.value).startswith(f"--set {item}: '{key}' ")
    assert "tiny.yaml" not in str(err.value)


def test_a_rule_between_two_keys_names_the_file_and_the_set_that_broke_it():
    with pytest.raises(ConfigError) as err:
        load_config(TINY, ["train.seed=3", "data.max_length=200"])
    message = str(err.value)
    assert message.startswith(f"{TINY} with --set data.max_length=200: 'model.max_positions' must exceed")
    assert "train.seed" not in message


def test_a_directory_or_a_device_given_as_config_is_named_as_such(tmp_path):
    with pytest.raises(ConfigError, match=f"config file {tmp_path} is a directory, not a YAML file"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="config file /dev/null is not a regular file"):
        load_config("/dev/null")


def test_a_set_head_size_lifts_the_divisibility_rule_and_old_configs_load_without_it():
    from mhatrain.model.sizes import head_size

    cfg = config_from_dict({"model": {"d_model": 100, "n_heads": 8, "d_head": 16}}, check_paths=False)
    assert head_size(cfg.model.d_model, cfg.model.n_heads, cfg.model.d_head) == 16
    old = config_from_dict({"model": {"d_model": 64, "n_heads": 4}}, check_paths=False)  # written before d_head
    assert old.model.d_head is None and head_size(64, 4, old.model.d_head) == 16


def test_head_gates_are_set_by_a_three_part_set_and_round_trip(tmp_path):
    from mhatrain.core.config import HeadGatesConfig, HeadsPerLayer, dump_config

    cfg = load_config(TINY, ["model.head_gates.l0=0.02", "model.head_gates.kinds=[cross]"])
    assert cfg.model.head_gates == HeadGatesConfig(l0=0.02, temperature=0.33, stretch=[-0.1, 1.1], kinds=["cross"])
    assert load_config(TINY).model.head_gates is None  # off unless asked for: the paper's model
    assert load_config(TINY, ["model.head_gates.l0=0.02", "model.head_gates=null"]).model.head_gates is None
    cfg = load_config(TINY, ["model.head_gates={l0: 0.1}", "model.heads_per_layer.cross=[1, 0]"])
    assert cfg.model.heads_per_layer == HeadsPerLayer(cross=[1, 0])
    dump_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
