import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.space import (
    AnnotateKnob,
    Annotation,
    ChoiceKnob,
    ConfigError,
    ConfigSpace,
    ReorderKnob,
    SplitKnob,
    SplitPolicy,
)


def brute_force_split(extent, parts, policy, max_innermost):
    if policy is SplitPolicy.FACTORS:
        sizes = [d for d in range(1, extent + 1) if extent % d == 0]
    elif policy is SplitPolicy.POWER2:
        sizes = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= extent]
    else:
        sizes = range(1, extent + 1)
    out = set()
    for inner in itertools.product(sizes, repeat=parts - 1):
        prod = math.prod(inner)
        if prod > extent or (policy is SplitPolicy.FACTORS and extent % prod):
            continue
        value = (math.ceil(extent / prod),) + inner
        if max_innermost is None or value[-1] <= max_innermost:
            out.add(value)
    return out


def small_space():
    return ConfigSpace("mm", (
        SplitKnob("tile_i", 12, 3),
        SplitKnob("tile_j", 10, 2, policy=SplitPolicy.POWER2),
        ReorderKnob("order", [("i", "j", "k"), ("k", "i", "j"), ("i", "k", "j")]),
        AnnotateKnob("inner"),
        ChoiceKnob("unroll", (0, 16, 64)),
        ChoiceKnob("cache_write", (False, True)),
    ))


def huge_space():
    return ConfigSpace("huge", tuple(SplitKnob(f"t{i}", 4096, 4) for i in range(10)))


# --- knobs -----------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(
    extent=st.integers(1, 72),
    parts=st.integers(1, 4),
    policy=st.sampled_from(list(SplitPolicy)),
    max_innermost=st.none() | st.integers(1, 16),
)
def test_split_enumerates_exactly_the_valid_splits(extent, parts, policy, max_innermost):
    expected = brute_force_split(extent, parts, policy, max_innermost)
    if not expected:
        with pytest.raises(ConfigError, match="no values"):
            SplitKnob("t", extent, parts, policy, max_innermost)
        return
    knob = SplitKnob("t", extent, parts, policy, max_innermost)
    assert len(knob.values) == len(set(knob.values)) == len(knob)
    assert set(knob.values) == expected
    for value in knob.values:
        assert math.prod(value) >= extent
        assert math.prod(value[1:]) <= extent
        if policy is SplitPolicy.FACTORS:
            assert math.prod(value) == extent


def test_split_examples():
    assert SplitKnob("t", 8, 2).values == ((8, 1), (4, 2), (2, 4), (1, 8))
    assert SplitKnob("t", 7, 2, policy="power2").values == ((7, 1), (4, 2), (2, 4))
    assert SplitKnob("t", 16, 2, max_innermost=4).values == ((16, 1), (8, 2), (4, 4))
    assert len(SplitKnob("t", 1024, 4)) == math.comb(13, 3)  # 2^10 into 4 ordered parts
    assert SplitKnob("t", 5, 1).values == ((5,),)


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="t", extent=0, parts=2), "extent"),
    (dict(name="t", extent=8, parts=0), "parts"),
    (dict(name="t", extent=8, parts=2, max_innermost=0), "max_innermost"),
    (dict(name="t", extent=True, parts=2), "extent"),
    (dict(name="bad name", extent=8, parts=2), "identifier"),
])
def test_split_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SplitKnob(**kwargs)


def test_split_policy_must_be_known():
    with pytest.raises(ConfigError, match="unknown policy 'primes'; known: factors, power2, any"):
        SplitKnob("t", 8, 2, policy="primes")


def test_reorder_knob():
    knob = ReorderKnob("order", [("i", "j"), ("j", "i")])
    assert knob.values == (("i", "j"), ("j", "i"))
    assert knob.index_of(["j", "i"]) == 1
    with pytest.raises(ConfigError, match="not a permutation"):
        ReorderKnob("order", [("i", "j"), ("i", "k")])
    with pytest.raises(ConfigError, match="not a permutation"):
        ReorderKnob("order", [("i", "j"), ("i", "i")])
    with pytest.raises(ConfigError, match="duplicate"):
        ReorderKnob("order", [("i", "j"), ("i", "j")])
    with pytest.raises(ConfigError, match="no values"):
        ReorderKnob("order", [])


def test_annotate_knob_uses_the_closed_vocabulary():
    knob = AnnotateKnob("inner", ("none", "vectorize"))
    assert knob.values == (Annotation.NONE, Annotation.VECTORIZE)
    assert knob.index_of("vectorize") == knob.index_of(Annotation.VECTORIZE) == 1
    with pytest.raises(ConfigError, match="has no value 'unroll'"):
        knob.index_of("unroll")
    with pytest.raises(ConfigError, match="known annotations"):
        AnnotateKnob("inner", ("none", "tensorize"))


def test_choice_knob_distinguishes_types():
    knob = ChoiceKnob("c", (0, 1, 2.5, "x"))
    assert knob.index_of(1) == 1
    assert knob.index_of(2.5) == 2
    for wrong in (True, 1.0, "1", [1], None, {"a": 1}):
        with pytest.raises(ConfigError, match="knob 'c'"):
            knob.index_of(wrong)
    flags = ChoiceKnob("f", (False, True))
    with pytest.raises(ConfigError):
        flags.index_of(0)
    with pytest.raises(ConfigError, match="duplicate"):
        ChoiceKnob("c", (1, 1))
    with pytest.raises(ConfigError, match="finite JSON scalars"):
        ChoiceKnob("c", (float("nan"),))
    with pytest.raises(ConfigError, match="finite JSON scalars"):
        ChoiceKnob("c", ((1, 2),))


# --- spaces ----------------------------------------------------------------

def test_space_is_the_mixed_radix_product():
    space = small_space()
    assert space.radices == tuple(len(k) for k in space.knobs)
    assert len(space) == space.size == math.prod(space.radices)
    seen = set()
    for index in range(space.size):
        config = space.get(index)
        assert space.encode(config.digits) == index
        seen.add(tuple(config[k.name] for k in space.knobs))
    assert len(seen) == space.size


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_index_config_json_round_trip(data):
    space = small_space()
    index = data.draw(st.integers(0, space.size - 1))
    config = space.get(index)
    text = json.dumps(config.to_json())
    back = space.from_json(json.loads(text))
    assert back == config and back.index == index
    assert all(back[k.name] == config[k.name] for k in space.knobs)


def test_config_values():
    space = small_space()
    config = space.from_values({"tile_i": [3, 2, 2], "tile_j": [3, 4], "order": ["k", "i", "j"],
                                "inner": "unroll", "unroll": 64, "cache_write": True})
    assert config["tile_i"] == (3, 2, 2)
    assert config["inner"] is Annotation.UNROLL
    assert config["cache_write"] is True
    assert config.to_json()["knobs"]["tile_j"] == [3, 4]
    with pytest.raises(ConfigError, match="no knob 'nope'"):
        config["nope"]


def test_get_rejects_out_of_space_indices():
    space = small_space()
    for bad in (-1, space.size, True, 1.5, "3"):
        with pytest.raises(ConfigError):
            space.get(bad)
    assert space.get(np.int64(3)).index == 3


def test_fingerprint_identifies_the_space():
    assert small_space().fingerprint == small_space().fingerprint
    assert small_space() == small_space()
    other = ConfigSpace("mm", (SplitKnob("tile_i", 24, 3),) + small_space().knobs[1:])
    assert other.fingerprint != small_space().fingerprint


def test_space_rejects_duplicate_knob_names():
    with pytest.raises(ConfigError, match="duplicate knob names"):
        ConfigSpace("mm", (SplitKnob("t", 8, 2), ChoiceKnob("t", (1,))))
    with pytest.raises(ConfigError, match="not a knob"):
        ConfigSpace("mm", ("t",))


# --- configs from files ----------------------------------------------------

def tampered(**changes):
    obj = small_space().get(123).to_json()
    knobs = dict(obj["knobs"])
    for key, value in changes.items():
        if key in obj and key != "knobs":
            obj[key] = value
        else:
            knobs[key] = value
    obj["knobs"] = knobs
    return obj


@pytest.mark.parametrize("obj, message", [
    (tampered(tile_i=[4, 4, 1]), r"knob 'tile_i'.*has no value \[4, 4, 1\]"),
    (tampered(tile_i=[12, 1]), r"knob 'tile_i'.*\[12, 1\]"),
    (tampered(tile_i="12"), r"knob 'tile_i'"),
    (tampered(tile_j=[3.0, 4]), r"knob 'tile_j'"),
    (tampered(order=["i", "j"]), r"knob 'order'"),
    (tampered(inner="tensorize"), r"knob 'inner'.*'tensorize'"),
    (tampered(unroll=True), r"knob 'unroll'.*True"),
    (tampered(unroll=16.0), r"knob 'unroll'"),
    (tampered(unroll="16; system('rm')"), r"knob 'unroll'"),
    (tampered(cache_write=1), r"knob 'cache_write'"),
    (tampered(extra_knob=1), r"no knob 'extra_knob'"),
    (tampered(template="conv2d"), r"template 'conv2d'"),
    (tampered(space="0123456789abcdef"), r"space '0123456789abcdef'"),
    (tampered(index=124), r"index 124 does not match"),
    (tampered(index=True), r"index True"),
    (tampered(index="123"), r"index '123'"),
])
def test_from_json_rejects_configs_outside_the_space(obj, message):
    with pytest.raises(ConfigError, match=message):
        small_space().from_json(obj)


def test_error_messages_stay_short():
    with pytest.raises(ConfigError) as info:
        small_space().from_json(tampered(unroll="x" * 100_000))
    assert len(str(info.value)) < 400


def test_from_json_rejects_malformed_objects():
    space = small_space()
    good = space.get(5).to_json()
    missing = dict(good, knobs={k: v for k, v in good["knobs"].items() if k != "unroll"})
    with pytest.raises(ConfigError, match="lacks knob 'unroll'"):
        space.from_json(missing)
    with pytest.raises(ConfigError, match="fields"):
        space.from_json(dict(good, comment="hi"))
    with pytest.raises(ConfigError, match="fields"):
        space.from_json({k: v for k, v in good.items() if k != "index"})
    with pytest.raises(ConfigError, match="JSON object"):
        space.from_json([1, 2, 3])
    with pytest.raises(ConfigError, match="must be an object"):
        space.from_json(dict(good, knobs=[1, 2]))


def test_from_json_rejects_a_config_of_the_same_template_with_other_shapes():
    ours = small_space()
    theirs = ConfigSpace("mm", (SplitKnob("tile_i", 16, 3),) + ours.knobs[1:])
    with pytest.raises(ConfigError, match="other shapes or knobs"):
        ours.from_json(theirs.get(0).to_json())


# --- huge spaces, sampling, neighbours -------------------------------------

def test_huge_space_works_without_enumeration():
    space = huge_space()
    assert space.size > 2**63
    rng = np.random.default_rng(0)
    picks = space.sample(1000, rng)
    assert len(set(picks)) == 1000 and all(0 <= i < space.size for i in picks)
    digits = space.decode_many(picks)
    assert [int(i) for i in space.encode_many(digits)] == picks
    config = space.get(picks[0])
    assert space.from_json(json.loads(json.dumps(config.to_json()))) == config
    neighbor = space.get(space.random_neighbor(picks[0], rng))
    assert sum(a != b for a, b in zip(config.digits, neighbor.digits)) == 1
    assert space.get(space.size - 1).digits == tuple(r - 1 for r in space.radices)


def test_sample_is_without_replacement_and_respects_exclude():
    space = small_space()
    rng = np.random.default_rng(1)
    exclude = set(range(0, space.size, 3))
    picks = space.sample(200, rng, exclude=exclude)
    assert len(picks) == len(set(picks)) == 200
    assert not exclude & set(picks)
    rest = space.sample(space.size, rng, exclude=exclude)
    assert sorted(rest) == sorted(set(range(space.size)) - exclude)
    assert space.sample(5, rng, exclude=set(range(space.size))) == []
    again = space.sample(10, np.random.default_rng(7))
    assert again == space.sample(10, np.random.default_rng(7))


def test_sample_is_roughly_uniform():
    space = ConfigSpace("u", (ChoiceKnob("a", tuple(range(10))), ChoiceKnob("b", tuple(range(1000)))))
    picks = space.sample(2000, np.random.default_rng(0))
    counts = np.bincount(space.decode_many(picks)[:, 0], minlength=10)
    assert counts.min() > 140 and counts.max() < 260


def test_random_neighbor_changes_exactly_one_knob():
    space = small_space()
    rng = np.random.default_rng(3)
    for index in space.sample(100, rng):
        n = space.random_neighbor(index, rng)
        assert sum(a != b for a, b in zip(space.decode(index), space.decode(n))) == 1
    single = ConfigSpace("one", (ChoiceKnob("c", (1,)),))
    with pytest.raises(ConfigError, match="single config"):
        single.random_neighbor(0, rng)


def test_empty_space_has_one_config():
    space = ConfigSpace("nothing", ())
    assert space.size == 1
    assert space.get(0).to_json()["knobs"] == {}
    assert space.sample(3, np.random.default_rng(0)) == [0]
