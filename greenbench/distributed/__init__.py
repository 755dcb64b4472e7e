"""What every distributed engine shares, below the models and strategies that use it: records of
the communication a rank issues (`greenbench.distributed.comm`), where a rank runs and how its
step time is read (`greenbench.distributed.device`), and the helpers the families'
parallel forms and the strategies both call."""
