"""The deletion keys of expectations: each observed deletion takes a key out in constant time (DeletionKeys), and
every version reads as the frozenset of the keys it holds, whichever version a key is taken from."""

from __future__ import annotations

import random

from reconciler.core.expectations import DeletionKeys, Expectations, expect
from tests.reconciler.builders import NOW

KEYS = frozenset(f"default/web-{i}" for i in range(40))


def _same(version: Expectations, keys: frozenset[str]) -> None:
    held = version.deletion_keys
    assert held == keys and keys == held
    assert len(held) == len(keys) and set(held) == keys and sorted(held) == sorted(keys)
    assert hash(held) == hash(keys)
    assert all(key in held for key in keys) and not any(key in held for key in KEYS - keys)
    assert version == Expectations(version.adds, version.dels, keys, version.set_at)


def test_every_version_holds_its_keys_whichever_version_a_deletion_is_observed_on() -> None:
    chooser = random.Random(25)
    versions = [(expect(0, len(KEYS), NOW, KEYS), KEYS)]
    for _ in range(400):
        # mostly the newest version (as the controllers do), sometimes an older one (a value the store kept)
        version, keys = versions[-1] if chooser.random() < 0.7 else chooser.choice(versions)
        key = chooser.choice(sorted(KEYS))  # some already taken out: nothing changes then
        versions.append((version.deletion_observed(key), keys - {key}))
        if chooser.random() < 0.2:
            versions.append((version.deletion_counted(key), keys - {key}))
    for version, keys in versions:
        _same(version, keys)


def test_a_deletion_not_awaited_changes_nothing_but_the_count() -> None:
    start = expect(0, 2, NOW, frozenset({"default/a", "default/b"})).deletion_observed("default/a")
    assert start.deletion_observed("default/a") is start
    assert start.deletion_observed("default/z") is start
    _same(start.deletion_counted("default/z"), frozenset({"default/b"}))
    assert start.deletion_counted("default/z").dels == 0


def test_the_newest_version_takes_a_key_out_without_copying_the_rest() -> None:
    version = expect(0, len(KEYS), NOW, KEYS).deletion_observed("default/web-0")
    first = version.deletion_keys
    assert isinstance(first, DeletionKeys)
    for i in range(1, len(KEYS) // 2):
        version = version.deletion_observed(f"default/web-{i}")
        keys = version.deletion_keys
        assert isinstance(keys, DeletionKeys) and keys._keys is first._keys  # shared, not copied
    # past half of them out, the rest is copied once, into a set of its own
    version = version.deletion_observed(f"default/web-{len(KEYS) // 2}")
    keys = version.deletion_keys
    assert isinstance(keys, DeletionKeys) and keys._keys is not first._keys and len(keys._keys) == len(keys)
    _same(version, frozenset(f"default/web-{i}" for i in range(len(KEYS) // 2 + 1, len(KEYS))))


def test_each_new_version_is_the_one_the_constructor_makes() -> None:
    """The versions made without the dataclass's __init__ (expectations._made) hold every field, stay frozen and
    hash and compare as the constructor's."""
    start = expect(3, 2, NOW, frozenset({"default/a", "default/b"}))
    made = {
        "creation_observed": (start.creation_observed(), Expectations(2, 2, start.deletion_keys, NOW)),
        "deletion_observed": (start.deletion_observed("default/a"), Expectations(3, 1, frozenset({"default/b"}), NOW)),
        "deletion_observed, no key": (start.deletion_observed(), Expectations(3, 1, start.deletion_keys, NOW)),
        "deletion_counted": (start.deletion_counted("default/b"), Expectations(3, 1, frozenset({"default/a"}), NOW)),
        "lowered": (start.lowered(adds=2, dels=1), Expectations(1, 1, start.deletion_keys, NOW)),
    }
    for what, (version, expected) in made.items():
        assert type(version) is Expectations, what
        assert (version.adds, version.dels, set(version.deletion_keys), version.set_at) == (
            expected.adds, expected.dels, set(expected.deletion_keys), expected.set_at), what
        assert version == expected and hash(version) == hash(expected), what
        try:
            version.adds = 0  # type: ignore[misc]
        except AttributeError:  # dataclasses.FrozenInstanceError
            pass
        else:
            raise AssertionError(f"{what}: not frozen")
