"""Finished runs on disk (ui/run_store.py): a race decoded in a forked worker, as on a ZeroGPU
Space, can still be inspected and exported by the app process afterwards."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest
import torch

from libraspec.records import read_trace
from libraspec.spec import RunSpec
from ui.races import KEPT_RUNS
from ui.render import TextSegments
from ui.run_store import RunStore
from ui.session import Session

LAYER = "app"  # tests/conftest.py


class FakeRun:
    def __init__(self, run_id):
        self.run_id = run_id


def test_store_keeps_the_newest_and_refuses_odd_ids(tmp_path):
    store = RunStore(tmp_path / "runs", keep=2)
    assert store.ids() == [] and store.load("abc") is None
    for run_id in ("a1", "b2", "c3"):
        store.save(FakeRun(run_id))
    assert store.ids() == ["b2", "c3"] and store.load("a1") is None and store.load("c3").run_id == "c3"
    assert store.load("../c3") is None and store.load("") is None
    with pytest.raises(ValueError, match="keep must be at least 1"):
        RunStore(tmp_path, keep=0)


def test_segments_pickle_without_their_decode_function():
    segments = TextSegments(lambda ids: "x" * len(ids))
    segments.ids, segments.pieces, segments.text = [5, 6], [["xx", "draft", 1]], "xx"
    again = pickle.loads(pickle.dumps(segments))
    assert again.decode is None and (again.ids, again.pieces, again.text) == ([5, 6], [["xx", "draft", 1]], "xx")


def _race_in_worker(session: Session, answer) -> None:
    torch.set_num_threads(1)
    final = list(session.races.stream("Count to five.", RunSpec(max_new_tokens=10)))[-1]
    answer.send((final.run.run_id, final.run.text("libraspec"), final.run.finished))


def race_in_fork(session: Session) -> tuple[str, str, bool]:
    """Run one race in a forked child (what spaces.GPU does) and return what it reported."""
    parent, child = multiprocessing.get_context("fork").Pipe()
    worker = multiprocessing.get_context("fork").Process(target=_race_in_worker, args=(session, child))
    worker.start()
    if not parent.poll(240):  # a child that spins (seen once under the two-worker suite) fails, not hangs
        worker.kill()
        raise AssertionError("the forked worker sent no race in 240 s")
    reply = parent.recv()
    worker.join(120)
    assert worker.exitcode == 0
    return reply


@pytest.mark.parametrize("persist", [True, False])
def test_a_race_from_a_forked_worker_is_available_afterwards(monkeypatch, tmp_path, persist):
    torch.set_num_threads(1)
    monkeypatch.setenv("LIBRASPEC_CACHE", str(tmp_path / "cache"))
    session = Session(offered=["tiny-llama"], runs_dir=tmp_path / "runs" if persist else None)
    for _ in session.load():  # weights and profile in the app process, as at a Space's start-up
        pass
    run_id, text, finished = race_in_fork(session)
    assert finished and text
    if not persist:  # the failure this store exists for: the worker's memory is gone
        with pytest.raises(ValueError, match="no stored run"):
            session.races.get_run(run_id)
        return
    run = session.races.get_run(run_id)
    assert run.finished and run.text("libraspec") == text and [r.run_id for r in session.races.runs()] == [run_id]
    frame = read_trace(session.races.export(run_id)[1])
    tokens = {mode: [t for row in rows["committed_tokens"] for t in row] for mode, rows in frame.groupby("mode")}
    assert tokens["static"] == tokens["libraspec"] == tokens["oracle"] == tokens["ar"]
    assert len(RunStore(tmp_path / "runs", KEPT_RUNS).ids()) == 1
