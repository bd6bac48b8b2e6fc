"""The draft gate of this project's rule: AR steps while no tree pays, probes with back-off, and a
drafter that pays never stopped by a few short accepts.

Costs are those of the tiny pair on the 2-core CPU, in round numbers: an AR step 18 ms, a
drafted step 45 ms, so a drafted step pays from 2.5 committed tokens on.
"""

from __future__ import annotations

from bastion.speculative.gate import FIRST_WAIT, MAX_WAIT, MIN_STEPS, PROBES_TO_RESUME, DraftGate

AR, DRAFTED = 18e-3, 45e-3


def _gate() -> DraftGate:
    return DraftGate(lambda c: AR, lambda n, c: DRAFTED)


def _run(gate: DraftGate, commits: list[int]) -> list[bool]:
    """Decide, then learn the step's count right away (the eager order without its one-step lag)."""
    decisions = []
    for a in commits:
        drafted = gate.drafts()
        decisions.append(drafted)
        if drafted:
            gate.observe(a, 16, 100)
    return decisions


# committed tokens a step of the shipped tiny pair at T = 0 (budget 16, stdlib-heldout and
# humaneval-pkg prompts): the slowest stretches of the sixteen prompts, where it pays least
SLOW_T0 = [
    [5, 4, 1, 2, 2, 2, 6, 3, 5, 4, 3, 5, 6, 4, 3, 7, 5, 7, 6, 2, 3, 8, 7, 2, 4, 7, 6, 6, 2],
    [3, 2, 1, 4, 2, 7, 3, 7, 8, 2, 4, 3, 1, 3, 3, 3, 4, 3, 4, 5, 9, 4, 11, 11, 16, 4],
    [2, 2, 3, 3, 4, 1, 1, 2, 3, 4, 3, 3, 6, 3, 4, 6, 4, 6, 4, 6, 8, 5, 8, 9, 12, 12, 3],
    [3, 1, 2, 3, 2, 4, 4, 3, 7, 2, 2, 3, 4, 2, 4, 3, 5, 5, 4, 4, 2, 1, 1, 3, 4, 4, 5, 3, 4, 3, 8, 5, 3, 4, 3, 7],
    [2, 3, 5, 5, 3, 2, 3, 4, 3, 3, 4, 3, 2, 3, 4, 3, 4, 5, 4, 3, 5, 4, 5, 5, 4, 5, 5, 3, 7, 4, 3, 4, 3, 2],
]


def test_a_drafter_that_pays_is_never_stopped():
    for commits in SLOW_T0:
        gate = _gate()
        assert all(_run(gate, commits)) and gate.skipped == 0, commits


def test_a_drafter_that_never_pays_stops_after_a_few_steps_and_probes_ever_more_rarely():
    gate = _gate()
    decisions = _run(gate, [1] * 800)
    assert decisions[:MIN_STEPS] == [True] * MIN_STEPS and not decisions[MIN_STEPS]
    probes = [i for i, d in enumerate(decisions) if d][MIN_STEPS:]
    gaps = [b - a - 1 for a, b in zip(probes, probes[1:])]  # AR steps between probes: doubling, then capped
    assert [probes[0] - MIN_STEPS] + gaps[:5] == [FIRST_WAIT, 2 * FIRST_WAIT, 4 * FIRST_WAIT, 8 * FIRST_WAIT,
                                                  16 * FIRST_WAIT, 32 * FIRST_WAIT]
    assert max(gaps) == MAX_WAIT and gaps[-1] == MAX_WAIT
    assert sum(decisions) < 0.06 * len(decisions)  # in the long run nearly every step is an AR step
    assert gate.skipped == len(decisions) - sum(decisions)


def test_a_probe_that_pays_resumes_drafting():
    gate = _gate()
    _run(gate, [1] * 30)
    assert not gate.drafting
    decisions = _run(gate, [6] * 40)  # the text turned predictable: the next probe pays
    first = decisions.index(True)
    assert all(decisions[first:]) and gate.drafting


def test_the_count_of_a_step_decided_before_drafting_stopped_is_not_a_probe():
    """The static engine reads a step after deciding the next: a drafted step read after the stop
    adds its gain and changes nothing, and only the probe's own count can resume drafting."""
    gate = _gate()
    for a in (1, 1, 1):
        assert gate.drafts()
        gate.observe(a, 16, 100)
    assert not gate.drafting
    gate.observe(9, 16, 100)  # a step decided while drafting, read late: a high count, but not a probe
    assert not gate.drafting and gate.wait == FIRST_WAIT
    assert [gate.drafts() for _ in range(FIRST_WAIT + 3)] == [False] * FIRST_WAIT + [True, False, False]
    gate.observe(9, 16, 100)  # the probe's count: it paid, and the next step probes again
    assert not gate.drafting and gate.drafts()
    gate.observe(9, 16, 100)  # the second in a row paid too: drafting resumes
    assert gate.drafting and gate.drafts()


def test_the_gain_is_weighed_at_the_step_s_own_tree_and_context():
    seen = []
    gate = DraftGate(lambda c: seen.append(("ar", c)) or AR, lambda n, c: seen.append(("drafted", n, c)) or DRAFTED)
    gate.drafts()
    gate.observe(3, 7, 250)
    assert seen == [("ar", 250), ("drafted", 7, 250)] and list(gate.gains) == [3 * AR - DRAFTED]


def _probe(gate: DraftGate, commits: int) -> int:
    """AR steps until the next probe, then the probe's count; returns the AR steps taken."""
    waited = 0
    while not gate.drafts():
        waited += 1
    gate.observe(commits, 16, 100)
    return waited


def test_a_probe_pays_only_when_it_surely_paid():
    """A probe pays when it is as sure as a stop: its gain, less Z spreads (the floor, one AR
    step), above zero; here 5 committed tokens and not 4 (90 - 45 > 36 > 72 - 45).  Only a
    paying probe is followed by another at the next step."""
    for commits, pays in ((4, False), (5, True)):
        gate = _gate()
        _run(gate, [1] * MIN_STEPS)
        assert not gate.drafting
        _probe(gate, commits)
        assert not gate.drafting and gate.paid == int(pays)
        assert gate.wait == (0 if pays else 2 * FIRST_WAIT)


def test_drafting_resumes_only_after_probes_in_a_row_that_paid():
    assert PROBES_TO_RESUME == 2
    gate = _gate()
    _run(gate, [1] * MIN_STEPS)
    assert _probe(gate, 9) == FIRST_WAIT and not gate.drafting
    assert _probe(gate, 9) == 0 and gate.drafting  # the second probe came at once, and paid
    assert not gate.gains  # the lucky probes are not in the window


def test_a_lucky_probe_followed_by_one_that_does_not_pay_keeps_the_stop():
    """A single probe that paid by luck, in a stretch where drafting does not pay, resumes nothing:
    the wait doubles as after any probe that did not pay, and the run of paying probes starts over."""
    gate = _gate()
    _run(gate, [1] * MIN_STEPS)
    _probe(gate, 12)
    assert _probe(gate, 1) == 0 and not gate.drafting and gate.paid == 0
    assert gate.wait == 2 * FIRST_WAIT
    _probe(gate, 12)  # one more lucky probe after the wait: still one in a row
    assert not gate.drafting and gate.paid == 1


def test_a_prompt_ending_between_two_paying_probes_starts_the_run_over():
    gate = _gate()
    _run(gate, [1] * MIN_STEPS)
    _probe(gate, 12)
    assert gate.drafts()  # the second probe is decided ...
    gate.restart()  # ... and the prompt ends before its count is read
    assert not gate.probing and gate.paid == 0 and gate.wait == 2 * FIRST_WAIT


def test_after_lucky_probes_the_steps_that_follow_decide_alone():
    gate = _gate()
    _run(gate, [1] * MIN_STEPS)
    _probe(gate, 12)  # probes far past the bar
    _probe(gate, 12)
    assert gate.drafting
    assert _run(gate, [1] * (MIN_STEPS + 1)) == [True] * MIN_STEPS + [False]  # three steps of one stop it again


def test_a_prompt_too_long_to_set_aside_drafts_its_first_step_whatever_the_gate():
    """A first step without a draft leaves the prompt's rows, and the AR steps' after them, for
    one later draft of at most ``room`` rows: a prompt that would not leave room for the longest
    wait drafts regardless, and the gate's wait is not spent on it."""
    gate = _gate()
    _run(gate, [1] * MIN_STEPS)
    assert not gate.drafting and gate.wait == FIRST_WAIT
    room = 1024
    assert gate.drafts_first(room - 2 * MAX_WAIT + 1, room) and gate.wait == FIRST_WAIT
    assert not gate.drafts_first(room - 2 * MAX_WAIT, room) and gate.wait == FIRST_WAIT - 1


def test_the_longest_wait_is_the_gates_own():
    gate = DraftGate(lambda c: AR, lambda n, c: DRAFTED, max_wait=8)
    decisions = _run(gate, [1] * 120)
    probes = [i for i, d in enumerate(decisions) if d][MIN_STEPS:]
    gaps = [b - a - 1 for a, b in zip(probes, probes[1:])]
    assert gaps[:2] == [2 * FIRST_WAIT, 8] and set(gaps[2:]) == {8}
    room, wait = 1024, gate.wait
    assert wait > 0 and gate.drafts_first(room - 16 + 1, room)  # past its margin of 2 x 8 rows: drafts regardless
    assert gate.wait == wait and not gate.drafts_first(room - 16, room) and gate.wait == wait - 1
