-- Schema version 9: GPU power limits, and what a node draws beyond the run's own devices.
-- runs: the power limit the run's GPUs were held at (NULL: their own limit, untouched), their
-- default limit, how it was applied (nvml as root, zeusd, or emulated: an emulated GPU's power
-- model) and a note (e.g. clipped to the allowed range).
-- results: the GPUs' mean and peak power per device; the node's own meter (IPMI DCMI or Redfish)
-- beside energy_j, never in it, with its source and a note (a meter that did not answer is
-- NULL with the reason, never 0); where energy_cpu_j and energy_dram_j came from when not from
-- the run's own meter (RAPL beside a GPU run's GPUs). Runs stored before this version have none
-- of these: NULL.
ALTER TABLE runs ADD COLUMN power_limit_w DOUBLE;
ALTER TABLE runs ADD COLUMN power_limit_default_w DOUBLE;
ALTER TABLE runs ADD COLUMN power_limit_via VARCHAR;
ALTER TABLE runs ADD COLUMN power_limit_note VARCHAR;
ALTER TABLE results ADD COLUMN gpu_power_avg_w DOUBLE;
ALTER TABLE results ADD COLUMN gpu_power_peak_w DOUBLE;
ALTER TABLE results ADD COLUMN energy_node_j DOUBLE;
ALTER TABLE results ADD COLUMN energy_node_source VARCHAR;
ALTER TABLE results ADD COLUMN energy_node_note VARCHAR;
ALTER TABLE results ADD COLUMN energy_host_source VARCHAR;
