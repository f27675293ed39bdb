"""What a running gateway counts, in Prometheus' text format at /metrics.

Each app owns its registry (no process-global state: two apps in one test process
count apart). Counters and histograms are fed where things happen; the gauges of
stored state (archive backlog, parts in doubt) are read from the database per scrape.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.gc_pauses import GcPauses

# Seconds: a turn is the model's time plus a few milliseconds of ours.
TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = (1_000, 2_500, 5_000, 10_000, 20_000, 40_000, 80_000, 160_000)


class Metrics:
    def __init__(self) -> None:
        # Long, but only a list: every metric declared once, with its help text.
        self.registry = registry = CollectorRegistry()
        self.inbound = Counter(
            "parley_inbound_messages",
            "Messages people sent, stored, by channel (redeliveries not counted).",
            ["channel"],
            registry=registry,
        )
        self.uploads = Counter(
            "parley_uploads",
            "Files people uploaded and Parley kept, by kind.",
            ["kind"],
            registry=registry,
        )
        self.files_fetched = Counter(
            "parley_files_fetched",
            "Files fetched from a platform after their message was stored, by channel and "
            "by what came of it (ready, too_large, unsupported, failed).",
            ["channel", "state"],
            registry=registry,
        )
        self.turns = Counter(
            "parley_turns",
            "Turns run, by what answered: the model, a command, the model-down notice, or "
            "nothing past the day's token budget (over_budget).",
            ["answer"],
            registry=registry,
        )
        self.turn_seconds = Histogram(
            "parley_turn_seconds",
            "From a turn's start to its reply stored.",
            buckets=TURN_BUCKETS,
            registry=registry,
        )
        self.model_seconds = Histogram(
            "parley_model_seconds",
            "Model calls of turns, from the request to the last piece of text.",
            buckets=TURN_BUCKETS,
            registry=registry,
        )
        self.model_fallbacks = Counter(
            "parley_model_fallbacks",
            "Turns' model calls a model failed, so the next one of PARLEY_LLM_FALLBACKS "
            "was asked, by the model that failed.",
            ["model"],
            registry=registry,
        )
        self.lookups = Counter(
            "parley_lookups",
            "Recall tool calls turns made, by tool.",
            ["tool"],
            registry=registry,
        )
        self.model_tokens = Counter(
            "parley_model_tokens",
            "Tokens of this process's model calls (turns; summaries and extraction where "
            "it runs them: the embedded job runner or `parley worker`) as the model server "
            "counted them: prompt (all, cached included), cached (read from its prompt "
            "cache), completion.",
            ["kind"],
            registry=registry,
        )
        self.live_window_tokens = Histogram(
            "parley_live_window_tokens",
            "Tokens in a conversation's live window after a turn.",
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.deliveries = Counter(
            "parley_delivery_parts",
            "Reply parts handed to platforms, by channel and outcome (sent, retried, failed).",
            ["channel", "outcome"],
            registry=registry,
        )
        self.stream_previews = Counter(
            "parley_stream_previews",
            "Previews of replies being written on messaging apps, by channel and outcome: "
            "sent, throttled (text that waited for the next preview, to keep the pace), "
            "dropped (the platform refused one: that reply's previews stop).",
            ["channel", "outcome"],
            registry=registry,
        )
        self.reminder_fires = Counter(
            "parley_reminder_fires",
            "Firings of reminders and follow-ups, by outcome: sent (within the grace "
            "window), late (once, after it), held, skipped (a follow-up past the cap or "
            "turned off), failed (nowhere to send it).",
            ["outcome"],
            registry=registry,
        )
        self.reminder_lag_seconds = Histogram(
            "parley_reminder_lag_seconds",
            "From a reminder's due time to its firing (the turn that writes it queued).",
            buckets=(1.0, 5.0, 15.0, 60.0, 300.0, 3_600.0, 86_400.0),
            registry=registry,
        )
        self.turns_waiting = Gauge(
            "parley_turns_waiting",
            "Conversations owed a turn that wait for one of this replica's turn slots.",
            registry=registry,
        )
        self.turn_leases = Gauge(
            "parley_turn_leases_held",
            "Conversations this replica holds the turn lease of.",
            registry=registry,
        )
        self.archive_chunks = Gauge(
            "parley_archive_chunks",
            "Archive chunks by status (pending and failed ones wait for a summary).",
            ["status"],
            registry=registry,
        )
        self.extraction_backlog = Gauge(
            "parley_profile_extraction_backlog",
            "Summarised chunks whose facts are not taken into a profile yet.",
            registry=registry,
        )
        self.queue_lag = Gauge(
            "parley_archive_lag_seconds",
            "Age of the oldest chunk still waiting for its summary (0: none waits).",
            registry=registry,
        )
        self.uncertain_parts = Gauge(
            "parley_delivery_parts_in_doubt",
            "Reply parts a crash left in doubt (sent or not, the platform never said).",
            registry=registry,
        )
        self.facts_refused = Gauge(
            "parley_profile_facts_refused",
            "Facts the model offered without evidence of a typed message, refused.",
            registry=registry,
        )
        self.gc_pauses = GcPauses()  # counts once the gateway runs: `watching()`
        registry.register(self.gc_pauses)

    def count_tokens(self, *, prompt: int, cached: int, completion: int) -> None:
        tokens = self.model_tokens
        tokens.labels("prompt").inc(prompt)
        tokens.labels("cached").inc(cached)
        tokens.labels("completion").inc(completion)

    def render(self) -> bytes:
        return generate_latest(self.registry)
