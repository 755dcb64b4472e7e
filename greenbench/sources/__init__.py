"""What a rank trains: every workload, greenbench's own and a user's, in one contract — a model
source, a batch source, a loss and a step's FLOPs (`contract.TrainingWorkload`).

`builtin` puts a model family's preset and the run's synthetic data in it, `user` a user's
`greenbench.user.Workload`, and `greenbench.rank.workload.rank_workload` picks the one a run
names. The strategies and the rank's loop take the contract and never ask which kind of
workload they train.
"""
