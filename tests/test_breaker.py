"""The circuit breaker's state machine, driven by an injected clock (no sleeping)."""

from searcher.config import BreakerSettings
from searcher.pipeline.resilience import CircuitBreaker, Deadline


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(threshold=3, recovery=30.0, half_open=2):
    clock = FakeClock()
    settings = BreakerSettings(
        failure_threshold=threshold, recovery_timeout=recovery, half_open_max_calls=half_open
    )
    return CircuitBreaker(settings, clock), clock


def test_opens_after_threshold_consecutive_failures_only():
    breaker, _ = make(threshold=3)
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure("http_status", "boom")
    breaker.record_success()  # a success resets the count
    for _ in range(2):
        breaker.record_failure("http_status", "boom")
    assert breaker.state == "closed"
    breaker.record_failure("http_status", "boom")
    assert breaker.state == "open"
    assert not breaker.allow()
    assert breaker.snapshot().last_error == "boom"


def test_half_open_after_recovery_timeout_then_closes_after_enough_successes():
    breaker, clock = make(threshold=1, recovery=30.0, half_open=2)
    breaker.record_failure("http_status", "down")
    clock.now += 29.9
    assert breaker.state == "open" and not breaker.allow()
    clock.now += 0.2
    assert breaker.state == "half_open"
    assert breaker.allow() and breaker.allow()
    assert not breaker.allow()  # no more trial calls than half_open_max_calls at once
    breaker.record_success()
    assert breaker.state == "half_open"
    breaker.record_success()
    assert breaker.state == "closed"
    assert breaker.allow()


def test_a_failure_while_half_open_reopens_and_restarts_the_timer():
    breaker, clock = make(threshold=5, recovery=10.0, half_open=3)
    for _ in range(5):
        breaker.record_failure("http_status", "x")
    clock.now += 10
    assert breaker.allow()
    breaker.record_failure("http_status", "still down")
    assert breaker.state == "open"
    clock.now += 9
    assert breaker.state == "open"
    clock.now += 1
    assert breaker.state == "half_open"


def test_release_frees_a_trial_slot_without_a_verdict():
    breaker, clock = make(threshold=1, recovery=1.0, half_open=1)
    breaker.record_failure("http_status", "x")
    clock.now += 1
    assert breaker.allow()
    assert not breaker.allow()
    breaker.release()
    assert breaker.allow()


def test_deadline_caps_timeouts_and_expires():
    clock = FakeClock()
    deadline = Deadline(2.0, clock)
    assert deadline.cap(5.0) == 2.0
    clock.now += 1.5
    assert deadline.cap(5.0) == 0.5 and deadline.cap(0.1) == 0.1
    assert not deadline.expired
    clock.now += 1.0
    assert deadline.expired and deadline.remaining() == 0.0 and deadline.cap(1.0) == 0.0
