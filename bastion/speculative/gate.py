"""Whether this project's rule drafts at all: AR steps while no tree pays, and probes to notice when one does again.

The budget rule sizes a tree once the draft exists, but the draft itself costs
``T_draft`` every step.  When the drafter's guesses rarely survive (a flat target
distribution at T = 1, a drafter that does not fit the text), every drafted step costs
more than the tokens it commits would cost by AR steps, whatever tree the rule builds.
The gate compares the two from the calibration's costs and what the steps commit:

    gain of a drafted step = committed tokens x T_ar(c) - T_step(n, c)

in seconds saved against committing the same tokens by AR steps, with ``T_ar`` an AR
step and ``T_step`` a drafted step of ``n`` nodes at context ``c``.  Drafting pays while
the gains are positive on average.

It keeps the gains of the last :data:`WINDOW` drafted steps and stops drafting once it is
confident they are negative: after at least :data:`MIN_STEPS` of them, when their mean
plus :data:`Z` standard errors is still below zero.  The spread is taken at least as one
token's worth (``T_ar``), so three unlucky steps of a drafter that pays do not stop it.
While stopped it runs AR steps and now and then one drafted step, a probe: after
:data:`FIRST_WAIT` AR steps, the wait doubling after every probe that did not pay, up to
:data:`MAX_WAIT`.  A probe pays when it is as confident that drafting pays as a stop is that
it does not: its gain less :data:`Z` spreads (one probe: the spread floor, ``T_ar``) is
above zero.  Drafting resumes only after :data:`PROBES_TO_RESUME` probes in a row paid, each
later one drafted as soon as the one before it is read: among the dozens of probes of a long
stop a few pay by luck alone, and a second in a row rarely does, while text that truly turned
predictable pays again at once.  Drafting then resumes with an empty window, since the probes that
resumed it were picked for their luck, and the next stop starts from half the wait.

These rules answer what the tiny experiment on an H100 showed at T = 1 (docs/performance.md).
With any positive gain resuming, and the resuming probe's gain kept in the window, probes
of three or four committed tokens (a drafted step there costs about as much as 2.7 AR
steps) resumed drafting, and after a probe of ten the window needed 17 more drafted steps,
of one to four tokens each, to stop again: 146 of 1,623 steps drafted in one run.  With one
probe sure of its gain resuming, single lucky probes still resumed spells of 9 and 21
drafted steps, most committing one or two tokens (0.88x AR in one run).  With the longest
wait at 64 AR steps, an H200 run at T = 1 (docs/performance.md) still drafted 25 single
probes in 1,164 steps.  A probe there takes in the held rows first and, by its phases'
times, costs three to four AR steps (about 0.8 ms against 0.19-0.24 ms) for the one or
two tokens it commits: by those costs the probes took 4-5% of the decode.  With waits of up to
:data:`MAX_WAIT` = 128 a long stop probes half as often; replayed on recorded T = 1
decodes that gains 0.3-1.2% over 64 (``benchmarks.gate_replay --waits``); three H100 runs
with 128 probed a third less, their T = 1 speedups within the spread of runs with 64.  The
price: text that turns predictable after a long stop is noticed up to 128 steps later.

A decoder keeps one gate for all its prompts (:meth:`DraftGate.restart` at each), so what
one prompt taught carries to the next, down to a prompt's first step: where the gate has
stopped drafting, that step is an AR step too and the prompt's rows wait for the first draft
with the rows of the steps after it (:meth:`DraftGate.drafts_first`).  A first step that drafted
regardless would be one drafted step a prompt: at T = 1 on an H100, 14 of the tiny
experiment's 68 drafted steps (of 1,645; docs/performance.md).  At T > 0 this makes a prompt's samples
depend on the prompts the decoder ran before it (which steps draft decides how many
numbers each step draws); they are exact samples of the target all the same.

Everything here runs on the host from values the host has read, so the static engine,
which launches a step's draft before it reads the previous step, decides from the steps
read so far (one step later than the eager engine).  The gate never changes what is
emitted, only how many steps draft: outputs stay the target's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

WINDOW = 16  # drafted steps whose gains the decision reads
MIN_STEPS = 3  # drafted steps before the gate may stop drafting
Z = 2.0  # standard errors the mean gain must stay below zero by
FIRST_WAIT = 2  # AR steps before the first probe
MAX_WAIT = 128  # the longest run of AR steps between probes
PROBES_TO_RESUME = 2  # probes in a row that must pay before drafting resumes


@dataclass
class DraftGate:
    """One decode's decision to draft or to take an AR step; see the module docstring."""

    ar_step: Callable[[int], float]  # context -> seconds of an AR step
    drafted_step: Callable[[int, int], float]  # (tree size, context) -> seconds of a drafted step
    gains: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # seconds, the last drafted steps'
    drafting: bool = True
    probing: bool = False  # a probe was decided and its count is not read yet
    wait: int = 0  # AR steps left before the next probe
    backoff: int = FIRST_WAIT  # the AR steps before the next probe, when this one does not pay
    paid: int = 0  # probes in a row that paid, since the last that did not
    skipped: int = 0  # AR steps taken in place of drafted ones
    probes_to_resume: int = PROBES_TO_RESUME
    max_wait: int = MAX_WAIT  # the longest wait (benchmarks.gate_replay compares others)

    def drafts(self) -> bool:
        """Whether the next step drafts: always while drafting pays, else once after each wait (a probe)."""
        if self.drafting:
            return True
        if not self.probing and self.wait == 0:
            self.probing = True  # no other probe until this one's count is read
            return True
        if not self.probing:
            self.wait -= 1
        self.skipped += 1
        return False

    def drafts_first(self, prompt_rows: int, room: int) -> bool:
        """:meth:`drafts` for a prompt's first step, whose draft would take in the prompt's ``prompt_rows``.

        Skipped, those rows wait for the first draft with the AR steps' after them, all of
        which a draft must take in at once: at most ``room`` rows.  A prompt whose rows and
        those of the longest wait (:attr:`max_wait` AR steps, with margin) would not fit
        drafts regardless.
        """
        return prompt_rows + 2 * self.max_wait > room or self.drafts()

    def restart(self) -> None:
        """A new prompt: a probe whose count was never read counts as one that did not pay."""
        if self.probing:
            self.probing = False
            self._probe_failed()

    def observe(self, committed: int, nodes: int, context: int) -> None:
        """A drafted step at ``context`` verified ``nodes`` nodes and committed ``committed`` tokens."""
        t_ar = self.ar_step(context)
        gain = committed * t_ar - self.drafted_step(nodes, context)
        if self.probing:
            self.probing = False
            if gain - Z * t_ar > 0:  # the stop's test turned round, for one step: its spread is the floor
                self._probe_paid()
            else:
                self._probe_failed()
            return
        self.gains.append(gain)  # (a step decided before drafting stopped, read after, only adds its gain)
        if self.drafting and len(self.gains) >= MIN_STEPS and self.upper(t_ar) < 0:
            self.drafting, self.wait = False, self.backoff

    def _probe_paid(self) -> None:
        """Probe again at the next step decided, or resume once :attr:`probes_to_resume` paid in a row."""
        self.paid += 1
        if self.paid < self.probes_to_resume:
            self.wait = 0
            return
        self.paid = 0
        self.drafting, self.backoff = True, max(FIRST_WAIT, self.backoff // 2)
        self.gains.clear()  # the probes were picked for their luck: the steps after them decide

    def _probe_failed(self) -> None:
        """Wait twice as long for the next probe (up to :attr:`max_wait`); a run of paying probes ends."""
        self.paid = 0
        self.backoff = min(2 * self.backoff, self.max_wait)
        self.wait = self.backoff

    def upper(self, spread_floor: float) -> float:
        """The mean gain plus :data:`Z` standard errors, the spread at least ``spread_floor``."""
        k = len(self.gains)
        mean = sum(self.gains) / k
        var = sum((g - mean) ** 2 for g in self.gains) / max(k - 1, 1)
        return mean + Z * max(math.sqrt(var), spread_floor) / math.sqrt(k)
