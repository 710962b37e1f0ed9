"""`kubus replay --from-file FILE --diff` on two cores (replay.parallel): the history cut at its restart, each
half replayed by its own process, and the answer the one-process replay gives (the same statistics, the same
first divergence or refused line)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from kube.core import Pod
from kube.pods import PodFacts
from kubus.cli import main
from replay import fileformat, parallel
from replay.bundles import Bundle
from replay.engine import Engine, Stats
from replay.fileformat import FormatError

_NO_TIME = {"seconds"}


def _counts(stats: Stats) -> dict[str, int]:
    return {k: v for k, v in dataclasses.asdict(stats).items() if k not in _NO_TIME}


def _alone(path: Path) -> Engine:
    _, bundles = fileformat.read_file(str(path))
    engine = Engine(compare=True)
    engine.run(bundles)
    return engine


def _restart_tick(bundles: list[Bundle]) -> int:
    restart = [b for b in bundles if b.tick.kind == "start"][1]
    assert restart.tick.id is not None
    return restart.tick.id


def test_the_history_is_cut_at_its_restart_and_replays_the_same(history_file: Path, bundles: list[Bundle]) -> None:
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None and at.tick == _restart_tick(bundles)
    data = history_file.read_bytes()
    lines = data[at.offset:].split(b"\n", 1)
    assert lines[0].startswith(b'{"line":"state"') or lines[0].startswith(b'{"line":"tick"')

    outcome = parallel.replay_diff(str(history_file), min_bytes=0)
    alone = _alone(history_file)
    assert outcome.processes == 2 and len(outcome.cpu) == 2
    assert outcome.divergence is None and alone.divergence is None
    assert _counts(outcome.stats) == _counts(alone.stats)
    assert outcome.stats.compared == outcome.stats.decisions > 0


def test_a_small_file_or_one_without_a_restart_replays_in_one_process(history_file: Path) -> None:
    assert parallel.cut(str(history_file)) is None  # under MIN_BYTES
    assert parallel.replay_diff(str(history_file)).processes == 1
    assert parallel.replay_diff(str(history_file), processes=1, min_bytes=0).processes == 1


def test_a_divergence_after_the_cut_is_the_one_process_replays_find(history_file: Path, bundles: list[Bundle],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The scale-down after the restart, with the ranking reversed (the forked process has the change too)."""
    import reconciler.core.replicaset.sync as rs_sync
    from reconciler.core.ranking import pods_to_delete_order, ranks_by_related_pods_on_same_node

    def reversed_order(facts: list[PodFacts], related: list[Pod], diff: int, now: datetime) -> list[Pod]:
        pods = [f.pod for f in facts]
        return list(reversed(pods_to_delete_order(pods, ranks_by_related_pods_on_same_node(pods, related), now)))[:diff]

    monkeypatch.setattr(rs_sync, "pods_to_delete", reversed_order)
    alone = _alone(history_file)
    assert alone.divergence is not None and alone.divergence.tick > _restart_tick(bundles)
    outcome = parallel.replay_diff(str(history_file), min_bytes=0)
    assert outcome.processes == 2
    assert outcome.divergence is not None
    assert outcome.divergence.describe() == alone.divergence.describe()
    assert _counts(outcome.stats) == _counts(alone.stats)


def _rewrite_tick(path: Path, tick: int, change: dict[str, object]) -> None:
    lines = path.read_bytes().split(b"\n")
    for i, line in enumerate(lines):
        if line.startswith(b'{"line":"tick"') and msgspec.json.decode(line)["id"] == tick:
            lines[i] = msgspec.json.encode({**msgspec.json.decode(line), **change})
            break
    else:
        raise AssertionError(f"no tick {tick}")
    path.write_bytes(b"\n".join(lines))


def test_a_restart_at_the_cut_that_loaded_something_else_is_a_divergence(history_file: Path,
                                                                           bundles: list[Bundle]) -> None:
    restart = next(b for b in bundles if b.tick.kind == "start" and b.tick.id == _restart_tick(bundles))
    assert restart.tick.state is not None
    state = {**restart.tick.state, "positions": {**restart.tick.state["positions"], "0": 1}}
    _rewrite_tick(history_file, _restart_tick(bundles), {"state": state})
    alone = _alone(history_file)
    outcome = parallel.replay_diff(str(history_file), min_bytes=0)
    assert outcome.processes == 2
    assert alone.divergence is not None and alone.divergence.index == -1
    assert outcome.divergence is not None and outcome.divergence.describe() == alone.divergence.describe()


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_refused_line_is_the_one_the_one_process_replay_refuses(history_file: Path, bundles: list[Bundle],
                                                                  where: str) -> None:
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None
    data = history_file.read_bytes()
    # an event line made unreadable, in the first half or in the second
    anchor = data.rfind(b'\n{"line":"event"', 0, at.offset) if where == "before" else \
        data.find(b'\n{"line":"event"', at.offset)
    assert anchor > 0
    history_file.write_bytes(data[:anchor + 1] + b"{" + data[anchor + 1:])
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    with pytest.raises(FormatError) as two:
        parallel.replay_diff(str(history_file), min_bytes=0)
    assert str(two.value) == str(alone.value)


def test_a_file_cut_short_is_refused_as_truncated(history_file: Path) -> None:
    data = history_file.read_bytes()
    history_file.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 1])  # without its end line
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    with pytest.raises(FormatError) as two:
        parallel.replay_diff(str(history_file), min_bytes=0)
    assert "truncated" in str(two.value) and str(two.value) == str(alone.value)


def test_kubus_replay_diff_runs_on_two_cores(history_file: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    used: list[int] = []
    replay_diff = parallel.replay_diff

    def counted(path: str, **kwargs: int) -> parallel.Outcome:
        outcome = replay_diff(path, min_bytes=0)
        used.append(outcome.processes)
        return outcome

    monkeypatch.setattr(parallel, "replay_diff", counted)
    alone = _alone(history_file)
    code = main(["replay", "--from-file", str(history_file), "--diff"])
    out = capsys.readouterr().out
    assert code == 0 and used == [2]
    assert f"no divergence: {alone.stats.compared:,} recorded decisions" in out
    assert f"replayed {alone.stats.events:,} events ({alone.stats.state:,} more at 2 start(s))" in out
    # printing decisions replays in one process, as before
    assert main(["replay", "--from-file", str(history_file), "--diff", "--decisions"]) == 0
    assert used == [2]


def test_end_line_counts_are_checked_over_both_halves(history_file: Path) -> None:
    data = history_file.read_bytes().rstrip(b"\n")
    head, end = data.rsplit(b"\n", 1)
    counts = msgspec.json.decode(end)["counts"]
    counts["event"] += 1
    history_file.write_bytes(head + b"\n" + msgspec.json.encode({"line": "end", "counts": counts}) + b"\n")
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    with pytest.raises(FormatError) as two:
        parallel.replay_diff(str(history_file), min_bytes=0)
    assert "the end line counts" in str(two.value) and str(two.value) == str(alone.value)


def test_an_instance_on_both_sides_of_the_cut_replays_in_one_process(history_file: Path, bundles: list[Bundle],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The second half's checks would miss the first half's lines of that instance (its event order, its decision
    ids): the file is replayed in one process, with the same answer."""
    first, second = [b.tick.instance for b in bundles if b.tick.kind == "start"][:2]
    data = history_file.read_bytes()
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None and first != second
    history_file.write_bytes(data[:at.offset] + data[at.offset:].replace(
        b'"instance":' + msgspec.json.encode(second), b'"instance":' + msgspec.json.encode(first)))
    alone = _alone(history_file)
    assert alone.divergence is None
    assert parallel.cut(str(history_file), min_bytes=0) is None  # the name came before: no cut there
    outcome = parallel.replay_diff(str(history_file), min_bytes=0)
    assert outcome.processes == 1 and outcome.divergence is None
    assert _counts(outcome.stats) == _counts(alone.stats)
    # had it cut there (as at a later start reusing an earlier name), the second half says which instances it
    # holds, and the file is replayed in one process
    monkeypatch.setattr(parallel, "_named_before", lambda *args: False)
    assert parallel.cut(str(history_file), min_bytes=0) is not None
    outcome = parallel.replay_diff(str(history_file), min_bytes=0)
    assert outcome.processes == 1 and outcome.divergence is None
    assert _counts(outcome.stats) == _counts(alone.stats)



def test_the_second_half_counts_the_lines_before_the_cut_only_to_show_a_line(history_file: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting the lines before the cut reads the whole first half: the second half does it only when it shows a
    line number (here a refused line), and then shows the line the one-process replay shows."""
    counted: list[int] = []
    count = parallel._lines_before

    def counting(path: str, offset: int) -> int:
        counted.append(offset)
        return count(path, offset)

    monkeypatch.setattr(parallel, "_lines_before", counting)
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None and counted == []
    half = parallel.replay_second_half(str(history_file), at)  # in this process, to see what it counts
    assert half.error is None and half.divergence is None and half.counts["event"] > 0
    assert counted == []

    data = history_file.read_bytes()
    anchor = data.find(b'\n{"line":"event"', data.find(b'{"line":"tick"', at.offset))  # after the cut's start tick
    history_file.write_bytes(data[:anchor + 1] + b"{" + data[anchor + 1:])
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    half = parallel.replay_second_half(str(history_file), at)
    assert counted == [at.offset]
    assert half.error == "format" and half.line == alone.value.line == data[:anchor + 1].count(b"\n") + 1
    assert half.message == str(alone.value)


def _refuse_a_state_line_of_the_cut(path: Path, at: parallel.Cut) -> int:
    """Makes a state line in the middle of the cut's start unreadable (not JSON, its length and beginning kept, so
    that the file is cut where it was); its line."""
    data = path.read_bytes()
    anchor = data.find(b'\n{"line":"state"', at.offset + (at.tick_offset - at.offset) // 2) + 1
    end = data.find(b"\n", anchor)
    assert at.offset < anchor < end < at.tick_offset and data[end - 1:end] == b"}"
    path.write_bytes(data[:end - 1] + b"]" + data[end:])
    assert parallel.cut(str(path), min_bytes=0) == at
    return data[:anchor].count(b"\n") + 1


def test_the_first_half_skips_the_state_lines_of_the_cut(history_file: Path, bundles: list[Bundle]) -> None:
    """Only a bootstrap reads them, and the second half bootstraps from them: the first half does not read them (a
    refused one in them shows it), and counts them for the end line's check."""
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None and at.states == len(next(b for b in bundles if b.tick.id == at.tick).messages) > 1
    whole = parallel.replay_first_half(str(history_file), at)
    line = _refuse_a_state_line_of_the_cut(history_file, at)
    first = parallel.replay_first_half(str(history_file), at)
    assert first.reached and first.divergence is None
    assert first.counts == whole.counts and first.counts["state"] == at.states + len(bundles[0].messages)
    # and the answer is still the one-process replay's: the line refused
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    with pytest.raises(FormatError) as two:
        parallel.replay_diff(str(history_file), min_bytes=0)
    assert str(two.value) == str(alone.value) and alone.value.line == line


def test_a_refused_state_line_of_the_cut_comes_before_its_divergence(history_file: Path,
                                                                     bundles: list[Bundle]) -> None:
    """The one-process replay refuses the line before it compares the store at the start tick after it."""
    restart = next(b for b in bundles if b.tick.kind == "start" and b.tick.id == _restart_tick(bundles))
    assert restart.tick.state is not None
    _rewrite_tick(history_file, restart.tick.id or 0,
                  {"state": {**restart.tick.state, "positions": {**restart.tick.state["positions"], "0": 1}}})
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None
    _refuse_a_state_line_of_the_cut(history_file, at)
    assert parallel.replay_first_half(str(history_file), at).divergence is not None
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    with pytest.raises(FormatError) as two:
        parallel.replay_diff(str(history_file), min_bytes=0)
    assert str(two.value) == str(alone.value)


def test_a_refused_start_tick_at_the_cut_is_refused_at_its_line(history_file: Path, bundles: list[Bundle]) -> None:
    """The first half numbers the lines after the state lines it skipped as the file does."""
    _rewrite_tick(history_file, _restart_tick(bundles), {"at": "not a time"})
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    data = history_file.read_bytes()
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None and alone.value.line == data[:at.tick_offset].count(b"\n") + 1
    with pytest.raises(FormatError) as two:
        parallel.replay_diff(str(history_file), min_bytes=0)
    assert str(two.value) == str(alone.value)


def test_a_start_whose_state_lines_follow_a_bundle_unfinished_is_not_cut_at(history_file: Path) -> None:
    """The first half, skipping the start's state lines, would see the event line before them go to the start tick
    and refuse the file otherwise than the one-process replay (which refuses the first state line after it)."""
    at = parallel.cut(str(history_file), min_bytes=0)
    assert at is not None
    data = history_file.read_bytes()
    event = data.rfind(b'\n{"line":"event"', 0, at.offset) + 1
    history_file.write_bytes(data[:at.offset] + data[event:data.find(b"\n", event) + 1] + data[at.offset:])
    assert parallel.cut(str(history_file), min_bytes=0) is None
    with pytest.raises(FormatError) as alone:
        _alone(history_file)
    with pytest.raises(FormatError) as two:
        parallel.replay_diff(str(history_file), min_bytes=0)
    assert str(two.value) == str(alone.value)
