-- Schema version 6: a configuration's name says when its ranks ran under a CPU quota each
-- (`RunSpec.name` adds "cpu-quota"), so the same layout with and without quotas, two
-- configurations with two config keys, no longer share one name. Runs stored before this
-- version get the suffix from their recorded rank_cpu_quota.
UPDATE runs SET config_name = config_name || ' cpu-quota'
WHERE rank_cpu_quota AND NOT ends_with(config_name, ' cpu-quota');
