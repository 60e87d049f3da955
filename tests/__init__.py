"""PhotoSearch tests: real Triton, real processes; fakes only for what cannot run here."""
