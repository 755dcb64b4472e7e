"""A run's data feed: the document stream and how each optimizer step's minibatch is made.

The feed (`DataPlan`) knows nothing of ranks. A strategy decides how its ranks share a
minibatch: data parallelism splits it into ``dp`` parts (`DataPlan.part`); a pipeline feeds a
whole part through its stages; a skip schedule routes microbatches its own way.
"""

from __future__ import annotations

from dataclasses import dataclass

from greenbench.data.batches import StepBatch, make_step_batches
from greenbench.data.markov import MarkovSource
from greenbench.data.packing import MEASURED
from greenbench.data.settings import DataSettings


@dataclass(frozen=True, slots=True)
class DataPlan:
    """The ``data.*`` settings of a run, with its token source."""

    source: MarkovSource
    lengths: str
    seq_len: int
    global_batch: int
    micro_batch: int
    balance: str
    cost_model: str
    scale: float
    seed: int
    #: ``(a, b)`` of ``cost_model = measured`` (`greenbench.data.cost_fit`), else None
    cost_fit: tuple[float, float] | None = None

    @classmethod
    def from_section(cls, data: DataSettings, *, seed: int, vocab_size: int) -> DataPlan:
        """The plan of a run's ``data`` section (its balance resolved, not ``auto``), drawn
        with the run's ``seed`` over a vocabulary of ``vocab_size`` tokens."""
        chain_seed = data.chain_seed if data.chain_seed >= 0 else seed
        return cls(
            source=MarkovSource(vocab_size=vocab_size, seed=chain_seed),
            lengths=data.lengths,
            seq_len=data.seq_len,
            global_batch=data.global_batch,
            micro_batch=data.micro_batch,
            balance=data.balance,
            cost_model=data.cost_model,
            scale=data.scale,
            seed=seed,
            cost_fit=(data.cost_a, data.cost_b) if data.cost_model == MEASURED else None,
        )

    def split(
        self, step: int, parts: int, *, docs: int | None = None, held_out: bool = False
    ) -> list[StepBatch]:
        """Step ``step``'s minibatch split into ``parts`` (one StepBatch each, in order);
        ``docs`` documents instead of ``global_batch``, from the held-out stream with
        ``held_out`` (`make_step_batches`)."""
        return make_step_batches(
            step,
            source=self.source,
            lengths=self.lengths,
            seq_len=self.seq_len,
            global_batch=self.global_batch if docs is None else docs,
            micro_batch=self.micro_batch,
            world_size=parts,
            mode=self.balance,
            cost_model=self.cost_model,
            scale=self.scale,
            seed=self.seed,
            cost_fit=self.cost_fit,
            held_out=held_out,
        )

    def part(self, step: int, index: int, parts: int) -> StepBatch:
        """Part ``index`` of ``parts`` of step ``step``'s minibatch."""
        return self.split(step, parts)[index]

    def held_out(self, docs: int) -> HeldOut:
        """The held-out set of ``docs`` documents: a batch source whose every step is the same
        set, drawn from a stream no training step draws from (`make_step_batches`'s
        ``held_out``), shared by ranks as a training minibatch is."""
        return HeldOut(self, docs)


@dataclass(frozen=True, slots=True)
class HeldOut:
    """A run's validation set (`DataPlan.held_out`), as a batch source: ``part`` gives share
    ``index`` of ``parts`` of the same ``docs`` documents whatever the step."""

    plan: DataPlan
    docs: int

    def part(self, step: int, index: int, parts: int) -> StepBatch:
        return self.plan.split(0, parts, docs=self.docs, held_out=True)[index]
