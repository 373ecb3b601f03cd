"""A PyTorch Lightning callback: reports the training loss of every batch from global rank 0.

    trainer = lightning.Trainer(callbacks=[SlaqCallback(job)])

Works with ``lightning`` or ``pytorch_lightning``; without either it is a plain class with the
same hooks (so it can be tested, and used by loops that call the hooks themselves).
"""

from typing import Optional

from .loop import Reporter

try:  # pragma: no cover - depends on what is installed
    from lightning.pytorch.callbacks import Callback as _Base
except ImportError:  # pragma: no cover
    try:
        from pytorch_lightning.callbacks import Callback as _Base
    except ImportError:
        _Base = object


class SlaqCallback(_Base):
    def __init__(self, job, loss_key: str = "loss", batch_size: Optional[int] = None):
        super().__init__()
        self.reporter = Reporter(job)
        self.loss_key = loss_key
        self.batch_size = batch_size

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.reporter.begin()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not getattr(trainer, "is_global_zero", True):
            return
        loss = outputs.get(self.loss_key) if isinstance(outputs, dict) else outputs
        if loss is None:
            loss = getattr(trainer, "callback_metrics", {}).get(self.loss_key)
        if loss is None:
            return
        self.reporter.step(loss, workers=getattr(trainer, "world_size", None), batch_size=self.batch_size)
