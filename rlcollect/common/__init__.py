"""What every layer shares, below all of them: the checks a ``load_state_dict`` makes
(:mod:`rlcollect.common.state`), where a warning points (:mod:`rlcollect.common.callers`) and the
process's global random generators, seeded and saved together, and those a policy holds
(:mod:`rlcollect.common.generators`)."""
