"""Scheduling: fusion of loop nests into kernels, reduction strategy, memory planning."""
from .schedule import Schedule, schedule

__all__ = ["Schedule", "schedule"]
