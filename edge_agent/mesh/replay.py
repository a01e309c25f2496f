"""Replay protection that holds whatever the receiver's wall clock does (docs/security.md).

A request passes ``credential.check_request`` only if its timestamp is within ``window_s`` of
the receiver's wall clock; the receiver then remembers its nonce for ``2 * window_s + 1``
seconds of the *monotonic* clock, so stepping the wall clock (NTP, an operator, faketime)
never forgets a nonce early; one whose timestamp the wall clock has not yet left a window
behind (it was accepted while the clock ran ahead) is kept longer, until it has. Below the
nonces is a high-water mark: the newest timestamp of any nonce forgotten. A request not newer
than it is refused (``too_old``), so a capture whose nonce was forgotten stays refused even
after the wall clock is stepped back to its time.

Memory is bounded: at ``cache_max`` nonces the oldest is forgotten early (raising the mark;
counted in ``evicted``), so the cache never refuses fresh traffic for being full; the price
under such a flood is that a genuine request older than the mark is refused ``too_old``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from edge_agent.mesh.credential import FleetKey, check_request, signed_fields
from edge_agent.mesh.errors import AuthError

#: Seconds a request's timestamp may differ from the receiver's clock (the mesh).
REPLAY_WINDOW_S = 30.0
#: Most nonces remembered (the mesh: one cache for the fleet key).
NONCE_CACHE_MAX = 100_000
#: Most nonces remembered per sender where each sender has its own key (the hub).
NONCE_CACHE_MAX_PER_SENDER = 10_000

Clock = Callable[[], float]


class NonceCache:
    """The nonces seen, each kept ``keep_s`` monotonic seconds; a high-water mark below them."""

    def __init__(
        self, keep_s: float, cache_max: int, monotonic: Clock, window_s: float, clock: Clock
    ) -> None:
        self.keep_s = keep_s
        self.cache_max = cache_max
        self.monotonic = monotonic
        self.window_s = window_s
        self.clock = clock
        self.floor = -math.inf  # newest timestamp of any nonce forgotten
        self.evicted = 0  # nonces forgotten early because the cache was full
        self._seen: OrderedDict[str, tuple[float, float]] = OrderedDict()  # -> (until, sent)

    def remember(self, nonce: str, sent: float) -> None:
        """Record ``nonce`` (of a request stamped ``sent``); AuthError if it may be a replay."""
        now, seen = self.monotonic(), self._seen
        oldest_valid = self.clock() - self.window_s
        while seen:
            first = next(iter(seen))
            until, stamp = seen[first]
            if until > now:
                break
            if stamp >= oldest_valid:  # still inside the wall clock's window: keep it longer
                seen.move_to_end(first)
                seen[first] = (now + self.keep_s, stamp)
            else:
                self._forget()
        if nonce in seen:
            raise AuthError(
                "replay", f"nonce {nonce[:12]}... already used: a replayed request is refused"
            )
        if sent <= self.floor:
            raise AuthError(
                "too_old",
                f"timestamp {sent:.3f} is not newer than {self.floor:.3f}, the newest request"
                " this receiver no longer remembers: refused as a possible replay (sign anew)",
            )
        if len(seen) >= self.cache_max:
            self._forget()
            self.evicted += 1
        seen[nonce] = (now + self.keep_s, sent)

    def _forget(self) -> None:
        _, (_, sent) = self._seen.popitem(last=False)
        self.floor = max(self.floor, sent)

    def __len__(self) -> int:
        return len(self._seen)


class Verifier:
    """Checks requests signed with one key (the mesh's fleet key) for ``me``; one cache."""

    def __init__(
        self,
        key: FleetKey,
        me: str,
        *,
        window_s: float = REPLAY_WINDOW_S,
        cache_max: int = NONCE_CACHE_MAX,
        clock: Clock = time.time,
        monotonic: Clock = time.monotonic,
    ) -> None:
        self.key = key
        self.me = me  # the recipient id requests must be signed for
        self.window_s = window_s
        self.cache_max = cache_max
        self.clock = clock  # wall clock: only for the timestamp window
        self.monotonic = monotonic  # how long nonces are kept
        self._nonces = self._new_cache()

    def _new_cache(self) -> NonceCache:
        keep = 2 * self.window_s + 1.0
        return NonceCache(keep, self.cache_max, self.monotonic, self.window_s, self.clock)

    def verify(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> str:
        """Return the sender's id, or raise AuthError (``ClockSkew`` when stale) naming why."""
        key = self.key_for(signed_fields(headers)[0])
        agent, nonce, sent = check_request(
            key,
            method,
            path,
            body,
            headers,
            me=self.me,
            now=self.clock(),
            window_s=self.window_s,
        )
        self._cache_for(agent).remember(nonce, sent)
        return agent

    def key_for(self, sender: str) -> FleetKey:
        """Return the key ``sender`` must have signed with."""
        return self.key

    def _cache_for(self, sender: str) -> NonceCache:
        return self._nonces

    def __len__(self) -> int:
        return len(self._nonces)


class KeyedVerifier(Verifier):
    """Checks requests each signed with its sender's own key (the hub: each agent's key).

    ``key_of(sender)`` returns the sender's key text, or None for a stranger. Each sender
    has its own bounded nonce cache and high-water mark, so one agent's traffic cannot evict
    another's; only senders holding a key get one, so their number is bounded by enrolment.
    """

    def __init__(
        self,
        key_of: Callable[[str], str | None],
        me: str,
        *,
        window_s: float = REPLAY_WINDOW_S,
        cache_max: int = NONCE_CACHE_MAX_PER_SENDER,
        clock: Clock = time.time,
        monotonic: Clock = time.monotonic,
    ) -> None:
        self.key_of = key_of
        self.me = me
        self.window_s = window_s
        self.cache_max = cache_max
        self.clock = clock
        self.monotonic = monotonic
        self._keys: dict[str, tuple[str, FleetKey]] = {}
        self._caches: dict[str, NonceCache] = {}

    def key_for(self, sender: str) -> FleetKey:
        """Return ``sender``'s key; AuthError ``unknown`` if it has none."""
        text = self.key_of(sender)
        if text is None:
            raise AuthError("unknown", f"{sender!r} holds no key here: enrol first")
        cached = self._keys.get(sender)
        if cached is None or cached[0] != text:  # new, or rotated by a re-enrolment
            cached = self._keys[sender] = (text, FleetKey(text))
        return cached[1]

    def _cache_for(self, sender: str) -> NonceCache:
        cache = self._caches.get(sender)
        if cache is None:
            cache = self._caches[sender] = self._new_cache()
        return cache

    def __len__(self) -> int:
        return sum(len(c) for c in self._caches.values())
