"""The endpoint backend: a capacity search or fixed-rate probe against an OpenAI-compatible server
the harness did not start (vLLM, SGLang, TGI, the in-repo server), as docs/endpoint.md describes:
`fit_config` fits the plan to the server's model and `max_model_len` before planning, the first
probe checks the server (answers, key, model, lengths, tokenizer), and the load generator checks
every answer (harness/loadgen/collect.py, tokens.py). Not deterministic: never cached."""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import ClassVar

from common.errors import HarnessError, RunBroken
from harness.backends.base import BackendJob, BackendRun
from harness.backends.live.client import measure, warn
from harness.backends.live.lifecycle import HealthWatch
from harness.backends.live.prometheus import server_root
from harness.backends.live.server import Endpoint, model_vocabulary
from harness.loadgen.run import auth_headers, prompt_fields
from harness.records import CUT_OFF_KINDS, RequestSpec, error_kind
from harness.settings.endpoint import EndpointSettings
from harness.settings.load import API_PATHS
from harness.workload.text_prompts import TextPrompter, with_prompt_texts

CALIBRATION_STREAM = 99  # rng sub-stream of the two calibration prompts
API_KEY_ENV = "OPENAI_API_KEY"  # the OpenAI SDK's variable: used when backend.api_key is not set


class _Server:
    """What the harness asks a server before measuring it (plain HTTP, no load generator)."""

    def __init__(self, conf: EndpointSettings) -> None:
        self.conf = conf
        self.base_url = server_root(conf.base_url)
        self.api_key = conf.api_key or os.environ.get(API_KEY_ENV) or None

    def get(self, path: str, timeout: float = 5.0, body: dict | None = None) -> tuple[int, bytes]:
        """GET `path`, or POST `body` as JSON to it."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        req = urllib.request.Request(self.base_url + path, data=data, headers={**headers, **auth_headers(self.api_key)})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_until_answering(self) -> bool:
        """Waits for the server; True if it has a /health to watch (a server without one is not
        watched: its requests still fail loudly)."""
        s = self.conf
        deadline = time.monotonic() + s.ready_timeout_s
        while True:
            try:
                status, _ = self.get("/health")
                if status == 200 or status == 404:  # 404: no /health here; /v1/models decides
                    return status == 200
                problem = f"/health answered HTTP {status}"
            except (urllib.error.URLError, OSError) as e:
                problem = str(getattr(e, "reason", e))
            if time.monotonic() > deadline:
                raise HarnessError(f"endpoint {self.base_url} does not answer ({problem}) after {s.ready_timeout_s:g} s")
            time.sleep(0.5)

    def served_model(self) -> tuple[str, int | None]:
        """The model to send (backend.served_model, or the one the server lists) and the longest
        request it takes (`max_model_len` in its /v1/models, as vLLM and the in-repo server say)."""
        s = self.conf
        status, body = self.get("/v1/models")
        if status == 401:
            how = "no API key was sent (backend.api_key or $OPENAI_API_KEY)" if not self.api_key else "the API key was refused"
            raise HarnessError(f"endpoint {self.base_url}: HTTP 401 on /v1/models: {how}")
        if status != 200:
            raise HarnessError(f"endpoint {self.base_url}: /v1/models answered HTTP {status}: {body[:200]!r}")
        try:
            models = {m["id"]: m for m in json.loads(body)["data"]}
        except (ValueError, KeyError, TypeError):
            raise HarnessError(f"endpoint {self.base_url}: /v1/models is not an OpenAI model list: {body[:200]!r}") from None
        name = s.served_model
        if name is None:
            if len(models) != 1:
                raise HarnessError(f"endpoint {self.base_url} serves {', '.join(models) or 'no model'}: "
                                   f"say which with backend.served_model=NAME")
            name = next(iter(models))
        if name not in models:
            raise HarnessError(f"endpoint {self.base_url} does not serve model {name!r}; it serves: {', '.join(models)}")
        limit = models[name].get("max_model_len")
        return name, int(limit) if isinstance(limit, int) else None


class EndpointBackend(_Server):
    name: ClassVar[str] = "endpoint"
    deterministic: ClassVar[bool] = False

    def __init__(self, job: BackendJob) -> None:
        super().__init__(job.settings_as(EndpointSettings))
        self.job = job
        self.endpoint: Endpoint | None = None
        self._health: HealthWatch | None = None
        self.prompter: TextPrompter | None = None
        self.overhead = 0  # tokens the server adds to every text prompt (BOS, chat template)

    @staticmethod
    def server_label(settings: EndpointSettings) -> tuple[str, dict]:
        """The one label a run against this server has (no scheduler of ours runs: the server's
        own does), and what the summary records in place of a scheduler's knobs."""
        return settings.served_model or "endpoint", {"server": settings.base_url, "served_model": settings.served_model,
                                                      "api": settings.api}

    @classmethod
    def fit_config(cls, config) -> tuple[dict[str, object], list[str]]:
        """Before planning: ask the server of `config` (an ExperimentConfig) which model it serves
        and the longest request it takes, and fit the config to them: backend.served_model is set,
        and a plan asking for longer requests than the server takes is fitted to its max_model_len
        (requests over it dropped, a note says so), or refused naming the server's flag where the
        config set max_model_len apart from dataset.max_total_tokens. Returns the changed keys
        (dotted, for the door to apply and save) and the notes."""
        server = _Server(config.backend)
        server.wait_until_answering()
        model, limit = server.served_model()
        fitted: dict[str, object] = {"backend.served_model": model}
        want, dataset = config.max_model_len, config.dataset
        if limit is None or limit >= want:
            return fitted, []
        flag = f"the server's --max-model-len (vllm serve, python -m engines.server) to {want}"
        if dataset.get("max_total_tokens") != want:
            raise HarnessError(f"endpoint {server.base_url} serves {model} with requests of at most {limit} tokens (its "
                               f"/v1/models max_model_len); the plan sets max_model_len={want}: raise {flag}, or "
                               f"set max_model_len={limit}")
        fitted.update({"max_model_len": limit, "dataset.max_total_tokens": limit})
        return fitted, [f"endpoint {server.base_url} takes requests of at most {limit} tokens ({model}'s max_model_len in its "
                f"/v1/models): the plan is fitted to it, {dataset['name']} requests over {limit} tokens are dropped "
                f"(max_model_len=dataset.max_total_tokens={limit}; the preset drops those over {want}); to measure the "
                f"preset's workload, raise {flag}"]

    # -- checks before the first probe -----------------------------------------------------

    def _counted(self, model: str, text: str) -> int:
        """How many prompt tokens the server counts for `text` (a one-token, unstreamed request)."""
        body = {"model": model, **prompt_fields(self.conf.api, text), "max_tokens": 1, "temperature": 0}
        status, raw = self.get(API_PATHS[self.conf.api], timeout=60, body=body)
        if status != 200:
            raise HarnessError(f"endpoint {self.base_url}: a text prompt to {API_PATHS[self.conf.api]} was answered "
                               f"HTTP {status}: {raw[:200]!r}")
        try:
            return int(json.loads(raw)["usage"]["prompt_tokens"])
        except (ValueError, KeyError, TypeError):
            raise HarnessError(f"endpoint {self.base_url} gives no usage.prompt_tokens: the prompt lengths it "
                               f"sees cannot be checked") from None

    def _calibrate(self, model: str) -> int:
        """The tokens the server adds to every prompt; a one-line error if it does not count as
        our tokenizer does (the difference of two prompts' counts must be theirs under it)."""
        short, long_ = (8, 40)
        # Seeded apart from the run's own prompts (text_prompts.TEXT_STREAM): no shared prefix to cache.
        texts = self.prompter.texts([short, long_], [(self.job.seed, CALIBRATION_STREAM, 0), (self.job.seed, CALIBRATION_STREAM, 1)])
        a, b = self._counted(model, texts[0]), self._counted(model, texts[1])
        if b - a != long_ - short or a < short:
            raise HarnessError(f"tokenizer {self.prompter.source} does not count as {model} at {self.base_url} does: "
                               f"prompts of {short} and {long_} tokens under it were counted {a} and {b} by the "
                               f"server; name the server's own tokenizer with backend.tokenizer")
        return a - short

    def __enter__(self) -> EndpointBackend:
        has_health = self.wait_until_answering()
        model, limit = self.served_model()
        if limit is not None and limit < self.job.max_model_len:
            raise HarnessError(f"endpoint {self.base_url} takes requests of at most {limit} tokens ({model}'s "
                               f"max_model_len); the plan's are up to {self.job.max_model_len}: set max_model_len="
                               f"{limit}, or raise the server's --max-model-len")
        if self.conf.tokenizer:
            self.prompter = TextPrompter(self.conf.tokenizer)
            self.overhead = self._calibrate(model)
            vocab, specials = 0, ()  # prompts are text: no token ids are drawn
        else:
            vocab, specials = model_vocabulary(self.conf.vocab_model or self.job.deployment.model_name)
        self.endpoint = Endpoint(self.base_url, model, vocab, specials, limit, self.api_key, self.conf.api)
        self._health = HealthWatch(self.base_url, self.conf.health_timeout_s if has_health else 0).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._health is not None:
            self._health.__exit__(*exc)
        self.endpoint, self._health = None, None

    def run(self, requests: Sequence[RequestSpec], label: str = "") -> BackendRun:
        if self.endpoint is None:
            raise RuntimeError("EndpointBackend.run outside `with`: the endpoint was not checked")
        if self.prompter is not None and any(r.prompt_segments is not None for r in requests):
            raise HarnessError("sessions and shared prefixes (dataset.sessions) are sent as token ids: use api=completions "
                               "without backend.tokenizer")
        if self.prompter is not None:
            texts = with_prompt_texts(requests, self.prompter, self.job.seed, self.overhead)
            grown = sum(a.prompt_len != b.prompt_len for a, b in zip(requests, texts))
            if grown:
                warn(f"{label}: {grown} of {len(texts)} prompts are not longer than the {self.overhead} tokens the "
                     f"server adds to each ({self.conf.api}); they were sent with one token of text, "
                     f"{self.overhead + 1} in all, and are recorded at that length")
            requests = texts
        out = measure(requests, self.endpoint, self.job, label, self._health.problem,
                      lambda reason: RunBroken(f"endpoint {self.base_url}: {reason}"))
        kinds = [error_kind(r.error) for r in out.records]
        tried = [(k, r.error) for k, r in zip(kinds, out.records) if k not in CUT_OFF_KINDS]
        if tried and all(k == "connect" for k, _ in tried):
            try:
                self.get("/v1/models")
            except (urllib.error.URLError, OSError):  # gone: nothing was measured
                raise RunBroken(f"endpoint {self.base_url} stopped answering: none of {len(tried)} requests sent "
                                f"connected ({tried[0][1]})") from None
        return out


Backend = EndpointBackend
