"""tilekit.sched: the schedule solver.

``schedule_pipelines(module, target)`` turns every ``pipeline`` op into the scheduled form
of ``docs/pipelines.md`` (rings of shared-memory stages, mbarriers, asynchronous copies,
optional warp roles) for one target and bucket; ``engines`` chooses each stream's copy
engine (TMA, cp.async or plain loads) from the bucket's facts; ``smem_plan`` places rings
and barriers in shared memory; ``report`` and ``dump`` say what was decided
(``TILEKIT_DUMP=sched``); ``protocol`` checks the scheduled barrier protocol.
"""

from tilekit.sched.engines import Engine, EngineDecision, EngineRule, Rejection, TensorFacts
from tilekit.sched.report import RoleMode, RolePlan, ScheduleReport, StreamReport
from tilekit.sched.schedule import schedule_function, schedule_pipelines
from tilekit.sched.smem_plan import SmemPlan, plan_shared_memory

__all__ = [
    "Engine", "EngineDecision", "EngineRule", "Rejection", "RoleMode", "RolePlan",
    "ScheduleReport", "SmemPlan", "StreamReport", "TensorFacts", "plan_shared_memory",
    "schedule_function", "schedule_pipelines",
]
