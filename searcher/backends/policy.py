"""Which backends a request uses, how (one, a fallback chain, or a fan-out), and their
weights in fusion. Policy is configuration, not code: see ``BackendsSettings``."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from searcher.auth.access import CollectionAccess
from searcher.backends.local import LocalSettings
from searcher.config import Settings
from searcher.errors import AccessDenied, InvalidRequest

Mode = Literal["single", "fallback", "fanout"]


@dataclass(frozen=True)
class BackendPlan:
    mode: Mode
    names: tuple[str, ...]
    weights: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    # Instances the policy names that are not enabled or not configured: left out, said.
    unavailable: tuple[str, ...] = ()
    # The request named its backends: when they all fail, no other one stands in.
    exclusive: bool = False
    # Instances never to be called for this request, not even as a fallback or a
    # correction: ``local`` ones whose collections the caller may not see.
    barred: tuple[str, ...] = ()

    def weight(self, backend: str) -> float:
        return self.weights.get(backend, 1.0)


def _check_names(names: list[str], known: Collection[str]) -> None:
    for name in names:
        if name == "auto":  # a list's entry: "auto" alone was planned before this check
            raise InvalidRequest(
                "constraints.backend",
                f'"auto" stands alone, not in a list (instances: {", ".join(known)})',
            )
        if name not in known:
            listed = ", ".join((*known, "auto"))
            raise InvalidRequest(
                "constraints.backend", f"unknown backend {name!r} (known instances: {listed})"
            )


def plan_backends(
    requested: str | list[str] | None,
    intent: str | None,
    settings: Settings,
    usable: Collection[str],
) -> BackendPlan:
    """An explicit name is used alone; a list fans out to those backends, and no other
    stands in for them; ``auto`` (or
    nothing) uses the intent's configured set if there is one, else ``backends.auto``
    (the fallback order, or a fan-out to every usable backend)."""
    cfg = settings.backends
    known = cfg.names
    base_weights: dict[str, float] = {name: cfg.get(name).weight for name in known}
    if isinstance(requested, str) and requested != "auto":
        _check_names([requested], known)
        return BackendPlan("single", (requested,), base_weights, "explicit backend", exclusive=True)
    if isinstance(requested, list):
        _check_names(requested, known)
        names = tuple(dict.fromkeys(requested))
        return BackendPlan("fanout", names, base_weights, "explicit list", exclusive=True)
    policy = cfg.intents.get(intent or "")
    if policy is not None:
        names = tuple(n for n in policy.backends if n in usable)
        left_out = tuple(n for n in policy.backends if n not in usable)
        weights: dict[str, float] = {n: base_weights[n] * policy.weights.get(n, 1.0) for n in known}
        return BackendPlan("fanout", names, weights, f"intent {intent}", left_out)
    names = tuple(n for n in cfg.fallback_order() if n in usable)
    mode: Mode = "fanout" if cfg.auto == "fanout" else "fallback"
    return BackendPlan(mode, names, base_weights, f"auto ({cfg.auto})")


def instance_collections(settings: Settings) -> dict[str, list[str]]:
    """The collections each ``local`` instance searches, by instance name."""
    found = {}
    for name in settings.backends.names:
        instance = settings.backends.get(name)
        if isinstance(instance, LocalSettings):
            found[name] = instance.names()
    return found


def within_access(
    plan: BackendPlan, access: CollectionAccess, settings: Settings
) -> tuple[BackendPlan, tuple[str, ...]]:
    """``plan`` without the ``local`` instances that search a collection the caller may not
    see (all of them ``barred``, so that no fallback or correction reaches them either),
    and those it named that were left out. A request that named such an instance itself
    is refused (``AccessDenied`` on ``constraints.backend``): it asked for what it may not
    have, and an answer from the other backends would pass for one that searched it."""
    collections = instance_collections(settings)
    barred = tuple(n for n, c in collections.items() if not access.allows_all(c))
    if not barred:
        return plan, ()
    named = tuple(n for n in plan.names if n in barred)
    if named and plan.exclusive:
        raise AccessDenied(
            "constraints.backend",
            f"this API key may not search the collections of {', '.join(named)} "
            "(searcher keys create --collections)",
        )
    kept = tuple(n for n in plan.names if n not in barred)
    return dataclasses.replace(plan, names=kept, barred=barred), named
