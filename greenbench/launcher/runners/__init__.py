"""The runners a configuration can be run by (filled in below)."""
