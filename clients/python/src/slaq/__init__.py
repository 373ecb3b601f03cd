"""Connect a training job to the slaq scheduler over NATS (the wire contract v1).

``Job`` is the synchronous client, ``AsyncJob`` the asyncio one; both say hello, report the loss
after every iteration, receive the allocation (the job's workers and batch size) and say bye.
"""

from .wire import Allocation, SlaqError
from .aio import AsyncJob
from .sync import Job
from .submit import submit, submit_async

__all__ = ["Allocation", "AsyncJob", "Job", "SlaqError", "submit", "submit_async"]
__version__ = "0.1.0"
