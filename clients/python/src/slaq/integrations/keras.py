"""A Keras callback: reports the training loss of every batch.

    model.fit(x, y, callbacks=[SlaqCallback(job)])

Subclasses ``keras.callbacks.Callback`` when Keras is installed, a plain class otherwise.
"""

from typing import Optional

from .loop import Reporter

try:  # pragma: no cover - depends on what is installed
    from keras.callbacks import Callback as _Base
except ImportError:  # pragma: no cover
    _Base = object


class SlaqCallback(_Base):
    def __init__(self, job, loss_key: str = "loss", workers: Optional[int] = None, batch_size: Optional[int] = None):
        super().__init__()
        self.reporter = Reporter(job, workers=workers)
        self.loss_key = loss_key
        self.batch_size = batch_size

    def on_train_batch_begin(self, batch, logs=None):
        self.reporter.begin()

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get(self.loss_key)
        if loss is not None:
            self.reporter.step(loss, batch_size=self.batch_size)
