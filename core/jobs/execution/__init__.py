"""Running a job: preparing it, the locked run, the dry run, the local and Ray backends, signals,
the summary."""
