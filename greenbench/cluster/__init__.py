"""Suites beyond one machine: a suite's configurations as jobs of a cluster's scheduler, their
results merged into one database.

greenbench grows no scheduler of its own: SLURM (through submitit) places the jobs. A job runs
its configurations with the same launcher as on one machine and writes each run to a result
shard beside the database (`greenbench.store.shard_writer`); the submitter, the database's one
writer, merges a job's shards when the scheduler says it is over, and stores what a job that
failed, timed out or was preempted did not finish as failed or interrupted with the
scheduler's reason. ``job_arrays`` groups configurations into job arrays, ``sbatch`` says what they
ask for, ``executors`` is the one place submitit is called, ``job`` runs on the nodes,
``manifest`` records each submission, ``submit`` / ``watch`` / ``collect`` drive it,
``command`` is `greenbench run --executor …`.
"""
