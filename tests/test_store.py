"""The shard store: atomic shards, coverage, canonical merge order, resume checks."""

import errno
import threading
import time

import pytest

from ftsim.experiments.output import OutputError
from ftsim.experiments.store import RunStore, StoreError, TaskKey, shard_texts


def _rows(point, policy, reps):
    return [{"point": point, "policy": f"p{policy}", "rep": r, "x": r / 3} for r in reps]


def test_task_key_names_sort_like_keys():
    keys = [TaskKey(1, 0, 0, 10), TaskKey(0, 2, 10, 20), TaskKey(0, 2, 0, 10)]
    assert sorted(k.name for k in keys) == [k.name for k in sorted(keys)]
    assert TaskKey(0, 2, 10, 20).reps == range(10, 20)


def test_merge_is_canonical_whatever_the_write_order(tmp_path):
    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    for key in [TaskKey(1, 0, 0, 2), TaskKey(0, 1, 2, 4), TaskKey(0, 0, 0, 4), TaskKey(0, 1, 0, 2)]:
        store.write_shard(key, *shard_texts(_rows(key.point, key.policy, key.reps), []))
    rows = store.rows()
    assert [(r["point"], r["policy"], r["rep"]) for r in rows] == [
        ("0", "p0", "0"),
        ("0", "p0", "1"),
        ("0", "p0", "2"),
        ("0", "p0", "3"),
        ("0", "p1", "0"),
        ("0", "p1", "1"),
        ("0", "p1", "2"),
        ("0", "p1", "3"),
        ("1", "p0", "0"),
        ("1", "p0", "1"),
    ]
    assert rows[1]["x"] == repr(1 / 3)  # exact float text
    assert store.covered() == {(0, 0): {0, 1, 2, 3}, (0, 1): {0, 1, 2, 3}, (1, 0): {0, 1}}


def test_shards_are_atomic_and_stray_files_ignored(tmp_path):
    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    (store.shards / ".p00000-q000-r0000000-0000002.csv.x.tmp").write_text("half a fi")
    (store.shards / "notes.csv").write_text("a\n1\n")
    key = TaskKey(0, 0, 0, 2)
    store.write_shard(key, *shard_texts(_rows(0, 0, key.reps), [{"rep": 0, "kind": "save"}]))
    assert store.done() == [key]
    assert store.timeline() == [{"rep": "0", "kind": "save"}]
    assert not [
        p for p in store.shards.iterdir() if p.name.endswith(".tmp") and "x.tmp" not in p.name
    ]


def test_resume_checks_the_config_hash(tmp_path):
    RunStore.create(tmp_path / "run", {"command": "sweep", "config_hash": "abc"})
    assert RunStore.resume(tmp_path / "run", "abc").root == tmp_path / "run"
    with pytest.raises(StoreError, match="different sweep"):
        RunStore.resume(tmp_path / "run", "def")
    with pytest.raises(StoreError, match="no such folder"):
        RunStore.resume(tmp_path / "elsewhere", "abc")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no sweep manifest"):
        RunStore.resume(tmp_path / "empty", "abc")
    with pytest.raises(StoreError, match="continue it with resume="):
        RunStore.create(tmp_path / "run", {"config_hash": "abc"})


def test_update_manifest_keeps_other_fields(tmp_path):
    store = RunStore.create(tmp_path / "run", {"config_hash": "abc", "sessions": []})
    store.update_manifest(sessions=[{"computed_reps": 3}])
    assert store.manifest() == {"config_hash": "abc", "sessions": [{"computed_reps": 3}]}


def test_the_merged_timeline_text_is_the_rows_written_again(tmp_path):
    """timeline_text joins the shards' bodies when they share a header, and writes the
    parsed rows again when they do not: either way the bytes of csv_text(timeline()),
    quoted fields and exact floats included."""
    from ftsim.experiments.output import csv_text

    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    phases = [{"rep": 0, "kind": "save", "detail": 'a, "b"', "end_h": 1 / 3}]
    for policy in (1, 0):
        key = TaskKey(0, policy, 0, 2)
        store.write_shard(key, *shard_texts(_rows(0, policy, key.reps), phases))
    joined = store.timeline_text()
    assert joined == csv_text(store.timeline()) and joined.count("rep,kind") == 1
    key = TaskKey(1, 0, 0, 2)  # another header: a column more
    store.write_shard(key, *shard_texts(_rows(1, 0, key.reps), [{**phases[0], "part": "x"}]))
    assert store.timeline_text() == csv_text(store.timeline())


def test_the_merged_rows_text_is_the_rows_written_again(tmp_path):
    """rows_text joins the shards' bodies when they share a header and hold each replication
    once, and writes the parsed rows again otherwise (a replication stored twice is merged
    once): either way the bytes of csv_text(rows())."""
    from ftsim.experiments.output import csv_text

    def rows(point, policy, reps):
        return [{**row, "note": 'a, "b"'} for row in _rows(point, policy, reps)]

    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    assert store.rows_text() == csv_text([])  # nothing stored yet
    for key in [TaskKey(0, 1, 0, 2), TaskKey(0, 0, 2, 4), TaskKey(0, 0, 0, 2)]:
        store.write_shard(key, *shard_texts(rows(key.point, key.policy, key.reps), []))
    joined = store.rows_text()
    assert joined == csv_text(store.rows()) and joined.count("point,policy") == 1
    assert joined.splitlines()[1:3] == [f'0,p0,{r},{r / 3!r},"a, ""b"""' for r in (0, 1)]
    key = TaskKey(0, 0, 1, 3)  # replications 1 and 2 stored again, by another task
    store.write_shard(key, *shard_texts(rows(0, 0, key.reps), []))
    assert store.rows_text() == csv_text(store.rows())
    assert len(store.rows_text().splitlines()) == 1 + 6
    store = RunStore.create(tmp_path / "other", {"config_hash": "abc"})
    for key, extra in [(TaskKey(0, 0, 0, 2), {}), (TaskKey(1, 0, 0, 2), {"more": 1})]:
        texts = shard_texts([r | extra for r in rows(key.point, 0, key.reps)], [])
        store.write_shard(key, *texts)
    assert store.rows_text() == csv_text(store.rows())  # another header: a column more


def test_the_merge_joins_the_shards_it_wrote_without_reading_them_back(tmp_path):
    """The texts of the shards a store wrote are joined as written (the files are not read
    again: here they are gone); a resumed store reads those of the earlier session."""
    from ftsim.experiments.output import csv_text

    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    first = [TaskKey(0, 0, 0, 2), TaskKey(0, 1, 0, 2)]
    for key in first:
        store.write_shard(key, *shard_texts(_rows(0, key.policy, key.reps), [{"rep": 0}]))
    rows, timeline = store.rows_text(), store.timeline_text()
    assert rows == csv_text(store.rows()) and timeline == csv_text(store.timeline())
    store.sync()
    saved = {p.name: p.read_bytes() for p in store.shards.glob("p*.csv")}
    for name in saved:
        (store.shards / name).unlink()
    assert (store.rows_text(), store.timeline_text()) == (rows, timeline)
    for name, data in saved.items():
        (store.shards / name).write_bytes(data)
    resumed = RunStore.resume(tmp_path / "run", "abc")
    key = TaskKey(1, 0, 0, 2)
    resumed.write_shard(key, *shard_texts(_rows(1, 0, key.reps), [{"rep": 0}]))
    assert resumed.rows_text() == csv_text(resumed.rows())
    assert resumed.rows_text().startswith(rows) and resumed.timeline_text().startswith(timeline)
    resumed.sync()


def _synced_paths(monkeypatch) -> list[str]:
    """The paths os.fsync is called on from now on (the real fsync still runs); the list is
    filled as the calls are made."""
    return _synced(monkeypatch, threads=False)


def _synced(monkeypatch, threads: bool = True) -> list:
    """(path, name of the calling thread) of each os.fsync call from now on, or the path
    alone without ``threads`` (the real fsync still runs); filled as the calls are made."""
    import os

    synced, fsync = [], os.fsync

    def record(fd):
        fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        synced.append((path, threading.current_thread().name) if threads else path)

    monkeypatch.setattr(os, "fsync", record)
    return synced


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _sync_threads() -> set:
    """The stores' syncing threads alive now (those of other tests' stores too)."""
    return {t for t in threading.enumerate() if t.name == "ftsim-sync"}


def test_shards_are_synced_to_disk_in_groups_behind_the_writer(tmp_path, monkeypatch):
    """A shard is synced by the store's thread, not the writer's: the first at once, with
    SHA256SUMS and the folder (the renames); those written during the gap after a group
    in the next, which sync() hurries and waits for; then the thread ends."""
    from ftsim.experiments import store as module

    monkeypatch.setattr(module, "SYNC_GAP_S", 3600.0)  # a group after the first: sync()'s
    calls = _synced(monkeypatch)
    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    store.behind = True  # as while a pool computes the tasks
    keys = [TaskKey(0, policy, 0, 2) for policy in range(3)]
    others = _sync_threads()

    def synced():  # not those of other tests' stores
        return [call for call in calls if call[0].startswith(str(store.shards))]

    def group(chosen):
        names = [f"{k.name}{suffix}.csv" for k in chosen for suffix in (".timeline", "")]
        paths = [str(store.shards / n) for n in [*names, "SHA256SUMS"]] + [str(store.shards)]
        return [(path, "ftsim-sync") for path in paths]

    for key in keys:
        store.write_shard(key, *shard_texts(_rows(0, key.policy, key.reps), [{"rep": 0}]))
        if key == keys[0]:
            _until(lambda: len(synced()) >= len(group(keys[:1])), "the first group not synced")
    assert synced() == group(keys[:1])  # the others wait for the gap to end
    waiting = threading.Thread(target=store.sync)
    waiting.start()
    waiting.join(timeout=30)
    assert not waiting.is_alive(), "sync() waited for the gap"
    assert synced() == group(keys[:1]) + group(keys[1:])
    assert not _sync_threads() - others  # nothing left: the thread ended
    store.sync()  # nothing new: nothing synced again
    assert synced() == group(keys[:1]) + group(keys[1:])


def test_shards_are_synced_on_the_writers_thread_when_it_computes_the_tasks(tmp_path, monkeypatch):
    """Not behind the writer: a shard written within SYNC_INTERVAL_S of the last sync waits
    for the next sync, which puts every shard since the last one on disk with SHA256SUMS
    and the folder (the renames); one written later is synced at once, with those before
    it, on the writer's thread; no syncing thread is started."""
    from ftsim.experiments import store as module

    calls = _synced(monkeypatch)
    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    monkeypatch.setattr(module, "SYNC_INTERVAL_S", 3600.0)
    keys = [TaskKey(0, policy, 0, 2) for policy in range(3)]
    others = _sync_threads()

    def synced():
        return [call for call in calls if call[0].startswith(str(store.shards))]

    for key in keys[:2]:
        store.write_shard(key, *shard_texts(_rows(0, key.policy, key.reps), [{"rep": 0}]))
    assert synced() == [] and not _sync_threads() - others
    store.sync()
    names = [f"{k.name}{suffix}.csv" for k in keys[:2] for suffix in (".timeline", "")]
    paths = [str(store.shards / n) for n in [*names, "SHA256SUMS"]] + [str(store.shards)]
    assert synced() == [(path, "MainThread") for path in paths]
    store.sync()  # nothing new: nothing synced again
    assert len(synced()) == len(paths)
    monkeypatch.setattr(module, "SYNC_INTERVAL_S", 0.0)
    store.write_shard(keys[2], *shard_texts(_rows(0, 2, keys[2].reps), []))
    assert synced()[len(paths) :] == [
        (str(store.shards / f"{keys[2].name}.csv"), "MainThread"),
        (str(store.shards / "SHA256SUMS"), "MainThread"),
        (str(store.shards), "MainThread"),
    ]
    assert not _sync_threads() - others


def test_a_study_syncs_behind_its_writer_only_while_a_pool_computes(tmp_path, monkeypatch):
    from ftsim.experiments import study
    from tests.conftest import SCENARIOS

    behind, write_shard = [], RunStore.write_shard

    def recorded(store, *args):
        behind.append(store.behind)
        return write_shard(store, *args)

    monkeypatch.setattr(RunStore, "write_shard", recorded)
    smoke = SCENARIOS / "smoke.yaml"
    plan = study.plan(smoke, ["run.replications=2"], ["policies.*.interval=10 min,30 min"])
    study.execute(plan, tmp_path / "pool", jobs=2, batch=2, say=None)
    assert behind and all(behind)
    behind.clear()
    study.execute(plan, tmp_path / "serial", jobs=1, batch=2, say=None)
    assert behind and not any(behind)


def test_a_failed_group_is_raised_by_the_next_write_and_synced_again(tmp_path, monkeypatch):
    from ftsim.experiments import store as module

    store = RunStore.create(tmp_path / "run", {"config_hash": "abc"})
    store.behind = True
    fsync = module._fsync

    def failing(path):
        if path.name != "SHA256SUMS":
            fsync(path)
        else:
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(module, "_fsync", failing)
    first, second = TaskKey(0, 0, 0, 2), TaskKey(0, 1, 0, 2)
    others = _sync_threads()
    store.write_shard(first, *shard_texts(_rows(0, 0, first.reps), []))
    _until(lambda: not _sync_threads() - others, "the syncing thread did not end")
    with pytest.raises(OutputError, match="input/output error"):
        store.write_shard(second, *shard_texts(_rows(0, 1, second.reps), []))
    assert not (store.shards / f"{second.name}.csv").exists()  # raised before writing it
    synced = _synced_paths(monkeypatch)
    monkeypatch.setattr(module, "_fsync", fsync)
    store.sync()  # the failed group again
    assert str(store.shards / f"{first.name}.csv") in synced


def test_a_sweep_syncs_its_last_shards_while_merging_and_when_interrupted(tmp_path, monkeypatch):
    from ftsim.experiments import store as module
    from ftsim.experiments import study, sweep
    from tests.conftest import SCENARIOS

    monkeypatch.setattr(module, "SYNC_INTERVAL_S", 3600.0)  # only the study's own syncs
    synced = _synced_paths(monkeypatch)
    smoke = SCENARIOS / "smoke.yaml"
    plan = study.plan(smoke, ["run.replications=2"], ["policies.*.interval=10 min,30 min"])
    done = study.execute(plan, tmp_path / "whole", jobs=1, say=None)
    shards = sorted(str(p) for p in (done.folder / "shards").glob("p*.csv"))
    assert len(shards) == 2 * 3 * 2 and set(shards) <= set(synced)
    calls, simulate_policies = [], sweep.simulate_policies

    def interrupted_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return simulate_policies(*args, **kwargs)

    monkeypatch.setattr(sweep, "simulate_policies", interrupted_third)
    synced.clear()
    with pytest.raises(study.StudyInterrupted) as stop:
        study.execute(plan, tmp_path / "cut", jobs=1, say=None)
    assert stop.value.kept_tasks == 2
    shards = sorted(str(p) for p in (tmp_path / "cut" / "shards").glob("p*.csv"))
    assert len(shards) == 2 * 2 and set(shards) <= set(synced)
