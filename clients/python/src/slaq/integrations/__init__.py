"""Adapters for training loops: a plain-loop ``Reporter`` and callbacks for PyTorch Lightning and
Keras. None of them imports a framework unless it is installed."""
