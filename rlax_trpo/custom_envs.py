"""Environments of this library's own, written as gymnax environments.

Importing this module registers them with `rlax_trpo.envs.register_env`; `rlax_trpo.envs`
imports it lazily, the first time an environment is looked up by name.
"""
