"""Cost and control: what a run or a job may spend and when it may go on.

Budgets (reserve before a model turn, settle after), provider rate limits shared
by every worker through the store, and the outage guard. Below the runs: a run's
model turn asks here before its request leaves; above the providers and the jobs.
"""
