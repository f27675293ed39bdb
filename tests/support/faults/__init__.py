"""A fault driver: Parley on Postgres, its own Redis and arq workers, under Telegram webhook
and web chat traffic, while the gateway, the workers and Redis are killed at random (issue 9).

Everything runs on the loopback: `parley serve` and `parley worker` as child processes
(their output in log files under the test's directory), a private `redis-server` on a free
port, and the fake model and fake Telegram Bot API inside the test process. The plan (how
many kills of what, the traffic, the gaps) comes from one seed, so a run can be repeated;
the timing of processes, of course, cannot.

- `plan`: the seed's plan of traffic and kills; `settings`: what every child runs with.
- `fakes`: the model and Telegram the children talk to; the model can hold a call open.
- `processes`: Redis and the `parley` children, started again after each kill.
- `traffic`: Telegram users and web chat visitors, retrying until acknowledged.
- `kills`: the kills, at the plan's moments of the traffic's progress.
- `snapshot`, `checks`: what the database holds, and what is wrong with it.
- `report`, `logs`: the run in a few lines; the children's complaints, when it failed.
- `rig`: all of it started, driven, settled and checked.
"""
