"""The Gradio app through its API (gradio_client) on the tiny random pair.

Invariants: greedy static, LibraSpec and oracle decoding give the target's own text (the
same as AR), and a cancelled run does not block the next one. Bad input: tests/test_bad_input.py.
"""

from __future__ import annotations

import os
import time

import pytest
from apptools import neutral_lookup_calibration, race

pytest.importorskip("gradio_client")
from gradio_client.exceptions import AppError  # noqa: E402

from libraspec.records import LIST_COLUMNS, read_trace  # noqa: E402
from ui.run import RACE_MODES  # noqa: E402

LAYER = "app"  # tests/conftest.py

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module", autouse=True)
def lookup_calibration(tmp_path_factory):
    with neutral_lookup_calibration(tmp_path_factory.mktemp("lookup")) as path:
        yield path


def test_named_endpoints(client):
    """The API's endpoints and the race's parameters, in the order and with the defaults the README
    documents (a renamed or reordered parameter breaks every client that passes it by position)."""
    named = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/race", "/export_trace"} <= set(named)
    parameters = {p["parameter_name"]: p for p in named["/race"]["parameters"]}
    assert list(parameters)[:4] == ["prompt", "alpha", "d_max", "static_length"]
    assert {"temperature", "max_new_tokens", "seed", "drafter", "modes", "tree_depth", "node_budget"} <= set(parameters)
    assert parameters["static_length"]["parameter_default"] == 0 and parameters["tree_depth"]["parameter_default"] == 0
    assert not parameters["prompt"]["parameter_has_default"]  # the one argument every call must give


def test_greedy_race_gives_three_identical_texts(client):
    static, libraspec, oracle, summary = race(client)
    assert static == libraspec == oracle
    assert summary["model"] == "tiny-llama" and summary["finished"]
    assert summary["settings"]["static_length"] == summary["n"] == 7
    for mode in ("static", "libraspec", "oracle"):
        entry = summary["modes"][mode]
        assert entry["tokens"] == summary["ar"]["tokens"] <= 24
        assert entry["finish_rank"] in (1, 2, 3)
        assert entry["speedup_measured"] > 0 and entry["speedup_modeled"] > 0
    modes = summary["modes"]
    for m, entry in modes.items():  # 1 + the modes faster beyond timing noise: no place inside the noise
        ahead = [o for o in modes if modes[o]["seconds"] < entry["seconds"] and o not in entry["within_noise_of"]]
        assert entry["finish_rank"] == 1 + len(ahead), (m, modes)


def test_exported_trace_matches_ar_tokens(client):
    summary = race(client, prompt="Count to ten.", max_new_tokens=20)[3]
    paths = client.predict(summary["run_id"], api_name="/export_trace")
    assert sorted(os.path.splitext(p)[1] for p in paths) == [".csv", ".parquet"]
    parquet = pq.read_table(next(p for p in paths if p.endswith(".parquet")))  # as any Parquet reader sees it
    assert all(str(parquet.schema.field(name).type).startswith("list<") for name in LIST_COLUMNS)
    for path in paths:
        frame = read_trace(path)
        assert set(frame["mode"]) == {"ar", "static", "libraspec", "oracle"}
        tokens = {mode: [t for row in rows["committed_tokens"] for t in row] for mode, rows in frame.groupby("mode")}
        assert tokens["static"] == tokens["libraspec"] == tokens["oracle"] == tokens["ar"]
        assert (
            len(frame)
            == sum(summary["modes"][m]["rounds"] for m in ("static", "libraspec", "oracle")) + summary["ar"]["rounds"]
        )
        annotated = frame[frame["mode"].isin(["static", "libraspec"])]["oracle_length"]
        assert annotated.notna().any()  # d* annotation for the inspector


def test_the_api_races_the_chosen_modes_tree_modes_included(client):
    """`modes` picks what races: the texts come in the columns' (the registry's) order, "" for the column left
    empty, and the summary and the export hold the raced modes only, the tree rounds with their trees."""
    static, tree, empty, summary = race(
        client, prompt="Count to ten.", max_new_tokens=16, modes="ddtree-libraspec,static", node_budget=100
    )
    assert summary["race_modes"] == ["static", "ddtree-libraspec"]
    assert set(summary["modes"]) == set(summary["race_modes"])
    assert static == tree and static and empty == "" and summary["finished"]
    assert summary["settings"]["node_budget"] == 64
    assert any(n.startswith("node budget 100 -> 64") for n in summary["notes"])
    paths = client.predict(summary["run_id"], api_name="/export_trace")
    frame = read_trace(next(p for p in paths if p.endswith(".csv")))
    assert set(frame["mode"]) == {"ar", "static", "ddtree-libraspec"}
    trees = frame[frame["mode"] == "ddtree-libraspec"]
    assert (trees["tree_size"] > 0).any()
    assert all(len(t) == size for t, size in zip(trees["tree_tokens"], trees["tree_size"]))
    with pytest.raises(AppError, match="at most 3 modes"):
        race(client, modes="static,libraspec,oracle,ddtree")


def test_unknown_run_id_is_refused(client):
    with pytest.raises(AppError, match="no stored run"):
        client.predict("not-a-run", api_name="/export_trace")


def test_cancelled_run_leaves_the_app_usable(client):
    job = client.submit(
        "Write a long essay.",
        2.2,
        24,
        7,
        0.0,
        400,
        0,
        0,
        32,
        0,  # LibraSpec start: the drafter's n
        "libraspec",
        "dflash",
        list(RACE_MODES),
        api_name="/race_live",
    )
    while len(job.outputs()) < 2 and not job.done():
        time.sleep(0.05)
    job.cancel()
    static, libraspec, oracle, summary = race(client, prompt="Hi!", max_new_tokens=12)
    assert static == libraspec == oracle and summary["finished"]


def test_two_clients_see_only_their_own_races(server):
    from gradio_client import Client

    alice, bob = Client(server, verbose=False), Client(server, verbose=False)
    summary = race(alice, prompt="Name three colours.", max_new_tokens=12)[3]
    assert len(alice.predict(summary["run_id"], api_name="/export_trace")) == 2
    with pytest.raises(AppError, match="no stored run"):
        bob.predict(summary["run_id"], api_name="/export_trace")
    assert alice.predict(False, api_name="/calibration")["samples"] > 0
    assert bob.predict(False, api_name="/calibration")["samples"] == 0


def test_the_race_drafts_with_the_chosen_drafter_and_says_which(client):
    static, libraspec, oracle, summary = race(
        client, prompt="Count to ten, then back.", max_new_tokens=24, drafter="hybrid"
    )
    assert static == libraspec == oracle and summary["drafter"] == "hybrid" and summary["finished"]
    assert race(client, prompt="Hi!", max_new_tokens=8)[3]["drafter"] == "dflash"  # "" = the pair's default
    paths = client.predict(summary["run_id"], api_name="/export_trace")
    frame = read_trace(next(p for p in paths if p.endswith(".csv")))
    assert set(frame["drafter"]) == {"hybrid"} and all(p.endswith("-hybrid" + os.path.splitext(p)[1]) for p in paths)
    sources = {s for row in frame[frame["mode"] != "ar"]["draft_sources"] for s in row}
    assert sources and sources <= {"dflash", "lookup"}
    for drafter in ("fastdllm", "eagle"):
        static, libraspec, oracle, summary = race(client, prompt="Count to ten.", max_new_tokens=12, drafter=drafter)
        assert static == libraspec == oracle and summary["drafter"] == drafter and summary["finished"]


def test_finish_ranks_follow_measured_seconds_and_the_verdict_weighs_noise(client):
    summary = race(client, prompt="Name three colours.", max_new_tokens=24)[3]
    modes = summary["modes"]
    ranked = sorted(modes, key=lambda m: modes[m]["seconds"])
    assert modes[ranked[0]]["finish_rank"] == 1 and all(modes[m]["finish_rank"] >= 1 for m in modes)
    tied = {m: set(modes[m]["within_noise_of"]) for m in modes}
    assert all(m in tied[other] for m in modes for other in tied[m])  # "within noise" goes both ways
    first = ranked[0]
    assert summary["verdict"].startswith("No clear winner" if tied[first] else "")
