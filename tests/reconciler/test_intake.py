"""reconciler.intake: the events delivered to the reconciler's loop, taken in order in batches, and its wakeups."""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg

from reconciler.intake import Intake

NEVER = 30.0  # a wait that would end only by its timeout fails the test by its length, not by a hang
SHORT = 0.02  # a wait expected to end by its timeout


def msg(seq: int) -> Msg:
    return Msg(_client=None, subject=f"kubus.events.{seq}", data=b"x")  # type: ignore[arg-type]


async def delivered(intake: Intake, *seqs: int) -> None:
    for seq in seqs:
        await intake.deliver(msg(seq))


def subjects(msgs: list[Msg]) -> list[str]:
    return [m.subject for m in msgs]


async def test_messages_are_taken_in_delivery_order_up_to_the_limit_and_the_rest_wakes_the_next_wait() -> None:
    intake = Intake()
    await delivered(intake, 1, 2, 3, 4, 5)
    assert await intake.wait(NEVER)
    first: list[Msg] = []
    intake.take(first, 3)
    assert subjects(first) == ["kubus.events.1", "kubus.events.2", "kubus.events.3"]
    assert len(intake) == 2
    assert await asyncio.wait_for(intake.wait(NEVER), 1.0)  # at once: two are still there
    rest: list[Msg] = []
    intake.take(rest, 3)
    assert subjects(rest) == ["kubus.events.4", "kubus.events.5"]
    assert len(intake) == 0


async def test_a_wait_after_every_message_was_taken_waits_for_the_next() -> None:
    """No wakeup is left behind by messages already taken (it would run an empty batch at once)."""
    intake = Intake()
    await delivered(intake, 1, 2)
    assert await intake.wait(0)
    taken: list[Msg] = []
    intake.take(taken, 10)
    assert len(taken) == 2
    assert not await intake.wait(SHORT)
    assert not await intake.wait(0)


async def test_a_kick_wakes_a_wait_once_without_a_message() -> None:
    intake = Intake()
    waiting = asyncio.ensure_future(intake.wait(NEVER))
    await asyncio.sleep(0)  # the wait has started (a step of the loop, not a synchronisation on time)
    assert not waiting.done()
    intake.kick()
    assert await asyncio.wait_for(waiting, 1.0)
    taken: list[Msg] = []
    intake.take(taken, 10)
    assert taken == []
    assert not await intake.wait(SHORT)  # the kick was taken by the first wait


async def test_a_kick_is_taken_by_a_wait_of_no_time() -> None:
    intake = Intake()
    intake.kick()
    assert await intake.wait(0)
    assert not await intake.wait(0)


async def test_a_delivery_wakes_a_waiting_loop() -> None:
    intake = Intake()
    waiting = asyncio.ensure_future(intake.wait(NEVER))
    await asyncio.sleep(0)
    await intake.deliver(msg(1))
    assert await asyncio.wait_for(waiting, 1.0)
    assert len(intake) == 1


async def test_gather_takes_what_arrives_within_the_window_until_the_limit() -> None:
    intake = Intake()
    await delivered(intake, 1)
    assert await intake.wait(0)

    async def later() -> None:
        await delivered(intake, 2)
        await asyncio.sleep(0)
        intake.kick()  # a kick in the window does not end it
        await asyncio.sleep(0)
        await delivered(intake, 3, 4)

    feeding = asyncio.ensure_future(later())
    msgs: list[Msg] = []
    await asyncio.wait_for(intake.gather(msgs, 3, NEVER), 5.0)  # ends at the limit, long before the window
    await feeding
    assert subjects(msgs) == ["kubus.events.1", "kubus.events.2", "kubus.events.3"]
    assert len(intake) == 1
    assert await intake.wait(0)  # the one left wakes the next batch


async def test_gather_ends_with_the_window_when_fewer_than_the_limit_came() -> None:
    intake = Intake()
    await delivered(intake, 1, 2)
    msgs: list[Msg] = []
    await asyncio.wait_for(intake.gather(msgs, 500, SHORT), 5.0)
    assert subjects(msgs) == ["kubus.events.1", "kubus.events.2"]
    assert not await intake.wait(0)
