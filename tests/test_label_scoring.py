"""Label scoring and contextual calibration (issue 12, item 2): the pure parts, fast.

The real engine's scoring runs in tests/test_label_scoring_engine.py.
"""

from __future__ import annotations

import math

import pytest

from relserve.engine.label_scoring import LabelTrie, asks, pick, surface_forms
from relserve.errors import ConfigError
from relserve.functions import CallOptions, make_call
from relserve.relquery import RelQuery

# a toy tokenizer: one token per character, ids are code points
encode = lambda text: [ord(c) for c in text]  # noqa: E731
END = 0


def test_surface_forms_add_the_capitalised_spelling_once():
    assert surface_forms("yes") == ["yes", "Yes"]
    assert surface_forms("Yes") == ["Yes"]
    assert surface_forms("4") == ["4"]


def test_trie_asks_each_prefix_for_exactly_its_next_tokens():
    trie = LabelTrie.build(["ab", "ac"], encode, END)
    # root: first tokens of "ab", "Ab", "ac", "Ac"; "a" and "A": their second tokens
    assert dict(trie.nodes) == {
        (): (ord("A"), ord("a")),
        (ord("A"),): (ord("b"), ord("c")),
        (ord("a"),): (ord("b"), ord("c")),
    }


def test_free_forms_only_drops_the_spellings_that_would_cost_a_request():
    # "ab" is two tokens: "Ab" would need its own inner node (A) and is left out; "c" keeps "C",
    # read from the root request that scores "c" anyway
    trie = LabelTrie.build(["ab", "c"], encode, END, free_forms_only=True)
    assert trie.sequences == (((ord("a"), ord("b")),), ((ord("c"),), (ord("C"),)))
    assert dict(trie.nodes) == {(): (ord("C"), ord("a"), ord("c")), (ord("a"),): (ord("b"),)}
    # without it: two inner nodes, "a" and "A"
    assert len(LabelTrie.build(["ab", "c"], encode, END).nodes) == 3


def test_a_label_that_prefixes_another_is_scored_with_its_end_token():
    trie = LabelTrie.build(["4", "45"], encode, END)
    four = trie.sequences[0][0]
    assert four == (ord("4"), END)
    assert dict(trie.nodes)[(ord("4"),)] == (END, ord("5"))


def test_label_logprobs_sum_tokens_add_spellings_and_normalise():
    trie = LabelTrie.build(["ab", "c"], encode, END)
    lp = {
        (): {ord("a"): math.log(0.2), ord("A"): math.log(0.2), ord("c"): math.log(0.1), ord("C"): math.log(0.1)},
        (ord("a"),): {ord("b"): math.log(0.5)},
        (ord("A"),): {ord("b"): math.log(0.5)},
    }
    got = trie.label_logprobs(lp, norm="sum")
    # ab: 0.2*0.5 + 0.2*0.5 = 0.2; c: 0.1 + 0.1 = 0.2 -> one half each
    assert got == pytest.approx({"ab": math.log(0.5), "c": math.log(0.5)})


def test_label_logprobs_mean_per_token_and_first_token_only():
    trie = LabelTrie.build(["ab", "c"], encode, END)
    lp = {
        (): {ord("a"): math.log(0.2), ord("A"): math.log(0.2), ord("c"): math.log(0.1), ord("C"): math.log(0.1)},
        (ord("a"),): {ord("b"): math.log(0.5)},
        (ord("A"),): {ord("b"): math.log(0.5)},
    }
    # mean per token: "ab" and "Ab" each (log 0.2 + log 0.5) / 2 = log 0.316..., summed over the
    # two spellings: 2 * sqrt(0.1) = 0.6325; "c": 0.1 + 0.1 = 0.2; normalised over the labels
    ab, c = 2 * math.sqrt(0.1), 0.2
    got = trie.label_logprobs(lp, norm="mean")
    assert got == pytest.approx({"ab": math.log(ab / (ab + c)), "c": math.log(c / (ab + c))})
    # first token only: 0.2 + 0.2 against 0.1 + 0.1; "ab" and "c" part at their first token, so
    # split (the default) reads the same
    assert trie.label_logprobs(lp, norm="first") == pytest.approx({"ab": math.log(2 / 3), "c": math.log(1 / 3)})
    assert trie.label_logprobs(lp) == trie.label_logprobs(lp, norm="split") == trie.label_logprobs(lp, norm="first")


def test_pick_divides_the_prior_out():
    lps = {"yes": math.log(0.3), "no": math.log(0.7)}
    assert pick(lps, None) == "no"
    # the model says "no" to 90% of content-free rows: 30% "yes" is then a strong yes
    assert pick(lps, {"yes": 0.1, "no": 0.9}) == "yes"


def test_pick_breaks_a_calibrated_tie_by_the_models_own_preference():
    lps = {"yes": math.log(0.2), "no": math.log(0.8)}
    assert pick(lps, {"yes": 0.2, "no": 0.8}) == "no"
    assert pick({"a": math.log(0.5), "b": math.log(0.5)}, None) == "a"


def test_method_option_is_checked_and_defaults_to_adaptive():
    with pytest.raises(ConfigError, match="method must be one of generate, score, prior, batch, bootstrap, adaptive, got 'vote'"):
        CallOptions(method="vote")
    assert make_call("llm_filter", "Is {r} good?").label_method == "adaptive"
    assert make_call("llm_filter", "Is {r} good?", method="calibrate").label_method == "prior"  # the old name
    assert make_call("llm_classify", "{r}", labels=["a", "b"], method="score").label_method == "score"
    # sampling asks for varied answers: scoring cannot give them, so it decodes
    assert make_call("llm_filter", "Is {r} good?", temperature=0.7).label_method == "generate"
    assert make_call("llm_map", "Say {r}").label_method is None


def test_result_cache_key_holds_the_method_and_the_calibrated_template():
    keys = {m: make_call("llm_filter", "Is {r} good?", method=m).sampling_settings() for m in ("generate", "score", "calibrate", "batch")}
    assert len({str(k) for k in keys.values()}) == 4
    # generate keeps the key it had before methods existed
    assert "method" not in keys["generate"]
    assert keys["calibrate"]["template"] == "Is {r} good?"
    # two templates can render one prompt, but their priors differ
    other = make_call("llm_filter", "Is {r} good?", method="calibrate")
    assert other.sampling_settings() == keys["calibrate"]
    assert make_call("llm_filter", "Is {r}  good?", method="calibrate").sampling_settings() != keys["calibrate"]


def test_relquery_checks_score_labels_and_prior():
    with pytest.raises(ConfigError, match="score_labels needs choices"):
        RelQuery("{a}", [{"a": 1}], score_labels=True)
    with pytest.raises(ConfigError, match="label_prior must give a probability for each choice"):
        RelQuery("{a}", [{"a": 1}], choices=["x", "y"], score_labels=True, label_prior={"x": 1.0})
    with pytest.raises(ConfigError, match="label_prior applies only with score_labels"):
        RelQuery("{a}", [{"a": 1}], choices=["x", "y"], label_prior={"x": 0.5, "y": 0.5})
    rq = RelQuery("{a}", [{"a": 1}], choices=["x", "y"], score_labels=True, label_prior={"x": 0.5, "y": 0.5})
    assert rq.sampling_key["score_labels"] is True


def test_calibration_probes_run_once_per_template_on_content_free_rows():
    import duckdb
    from engine_doubles import ScriptedEngine

    import relserve.duckdb
    from relserve.planner.cache import ResultCache

    eng = ScriptedEngine(model_id="probe-model")
    con = duckdb.connect()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        relserve.duckdb.install(con, engine=eng, cache=ResultCache(Path(tmp) / "c.sqlite"), progress=False)
        con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a'), ('b'), ('c')) v(r)")
        relserve.duckdb.sql(con, "SELECT llm_filter('Is {r} fine?', r, llm_options(method := 'bootstrap')) FROM t").fetchall()
        relserve.duckdb.sql(con, "SELECT llm_filter('Is {r} fine?', r, llm_options(method := 'bootstrap')) FROM t WHERE r <> 'a'").fetchall()
    # the default completion shape lays the probes out as its rows: every value in front, named,
    # and the question names it (relserve/labels/prior.py)
    assert eng.probes == [["R: N/A\nIs the r above fine?", "R: \nIs the r above fine?", "R: [MASK]\nIs the r above fine?"]]
    # three rows: below batch calibration's minimum, so the content-free prior decides; its
    # probes ran beside the rows (the engine got no prior: the executor picked), and the second
    # statement's rows came from the result cache
    (rq,) = eng.relqueries
    assert rq.score_labels and rq.label_prior is None


def test_split_reads_each_label_up_to_where_it_parts_from_the_others():
    # "ab" and "ac" part at their second token; "xyz" at its first ("x"; "X" for "Xyz")
    trie = LabelTrie.build(["ab", "ac", "xyz"], encode, END)
    assert trie.read("split") == (
        (tuple(map(ord, "ab")), tuple(map(ord, "Ab"))),
        (tuple(map(ord, "ac")), tuple(map(ord, "Ac"))),
        ((ord("x"),), (ord("X"),)),
    )
    # only the root, "a" and "A" are asked: not "x", "xy", "X", "Xy"
    assert set(trie.needed_nodes("split")) == {(), (ord("a"),), (ord("A"),)}
    assert len(asks(trie, 20, norm="split")) == 3 and len(asks(trie, 20, norm="mean")) == 7
    # labels with different first tokens: one request per row, whatever their length
    assert asks(LabelTrie.build(["pale ale", "stout", "wheat beer"], encode, END), 20, norm="split") == [
        ((), tuple(sorted(map(ord, "psSwWP"))))]
    # more next tokens than one request may return: the node is asked in chunks of 20
    wide = LabelTrie.build([chr(c) for c in range(ord("a"), ord("l"))], encode, END)  # 11 labels, 22 spellings
    assert [len(w) for _, w in asks(wide, 20)] == [20, 2]
    # the score is the probability of the tokens read, summed; missing deeper nodes are not read
    lp = {(): {ord("a"): math.log(0.4), ord("A"): math.log(0.1), ord("x"): math.log(0.3), ord("X"): math.log(0.2)},
          (ord("a"),): {ord("b"): math.log(0.5), ord("c"): math.log(0.5)},
          (ord("A"),): {ord("b"): math.log(1.0), ord("c"): math.log(1e-9)}}
    got = {k: math.exp(v) for k, v in trie.label_logprobs(lp, norm="split").items()}
    assert got == pytest.approx({"ab": 0.3, "ac": 0.2, "xyz": 0.5}, abs=1e-6)
    # a label that is a prefix of another parts from it at the end token
    prefix = LabelTrie.build(["a", "ab"], encode, END)
    assert prefix.read("split")[0] == ((ord("a"), END), (ord("A"), END))
