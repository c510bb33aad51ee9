"""Grafana dashboards: the PromQL of a dashboard's panels and the metric names it reads
(checked against a real /metrics capture in the tests), the check SGLang's downloaded
dashboard passes before Grafana gets it, and the GPU dashboard of the DCGM exporter's default
counters (data/monitoring.toml [dcgm_exporter]), built here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from pyinfra_sglang import data

# A metric name in PromQL: letters, digits, '_' and ':' (Prometheus's data model).
_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every panel target's ``expr``, nested rows included, in the dashboard's order."""
    found: list[str] = []

    def walk(panels: Any) -> None:
        # A downloaded file is checked with this too: anything not a list of objects is skipped.
        for panel in panels if isinstance(panels, list) else []:
            if not isinstance(panel, dict):
                continue
            for target in panel.get("targets") or []:
                if isinstance(target, dict) and isinstance(target.get("expr"), str):
                    found.append(target["expr"])
            walk(panel.get("panels"))

    walk(dashboard.get("panels", []))
    return found


def metric_names(expr: str, prefix: str) -> set[str]:
    """The metric names starting with ``prefix`` that ``expr`` reads (label values, the
    quoted strings, are left out)."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return {name for name in _METRIC.findall(unquoted) if name.startswith(prefix)}


def exposed_family(name: str, families: set[str]) -> bool:
    """Is ``name`` a family in ``families`` (a # TYPE line's name), or one of a histogram's
    series (_bucket, _sum, _count)?"""
    if name in families:
        return True
    return any(name.endswith(s) and name[: -len(s)] in families for s in _HISTOGRAM_SUFFIXES)


def capture_families(text: str) -> set[str]:
    """The metric names a /metrics capture shows: its # TYPE lines' families and the names
    of its samples (a capture of polls may carry no # TYPE line)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE ") and len(line.split()) >= 4:
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            match = _METRIC.match(line)
            if match:
                names.add(match.group(0))
    return names


# A line git leaves in a file whose merge conflicted (a stored upstream version of SGLang's
# dashboard had them): <<<<<<< ours, ||||||| base (diff3), =======, >>>>>>> theirs.
_CONFLICT_MARKER = re.compile(r"^(?:<{7}|\|{7}|>{7})(?: |$)|^={7}$", re.MULTILINE)


def known_sglang_metrics() -> set[str]:
    """The SGLang metric families this project checked against the release's real /metrics
    (tests/unit/test_monitoring.py): those SGLang's dashboard reads and those the alert
    rules read (data/monitoring.toml)."""
    conf = data.monitoring()
    known = set(conf.grafana.sglang_dashboard_metrics)
    for alert in conf.alerts:
        known |= metric_names(alert.expr, "sglang")
    return known


# A downloaded dashboard is read within these: SGLang's is ~25 KB and nests 8 levels deep.
# json.loads itself raises RecursionError near 1000 levels: caught, refused the same way.
MAX_DASHBOARD_BYTES = 2 * 1024 * 1024
MAX_DASHBOARD_DEPTH = 64
# Problems named in one refusal; the rest are counted.
_SHOWN_PROBLEMS = 5


def dashboard_refusal(
    content: bytes | str, known: set[str] | None = None, datasource_uid: str | None = None
) -> str | None:
    """Why a downloaded SGLang dashboard must not be provisioned, or None when it may: at
    most MAX_DASHBOARD_BYTES and MAX_DASHBOARD_DEPTH levels of nesting, no merge-conflict
    marker, UTF-8 JSON of a dashboard object with panels, and every query in it (panels',
    nested rows' and the legacy ``rows``' targets, templating variables, annotations) reads
    only metric families of ``known`` (default known_sglang_metrics()), a histogram's series
    included, by name (no ``__name__`` matcher, no selector of labels alone, no Grafana
    variable where a name goes) from the provisioned Prometheus datasource (data/
    monitoring.toml [grafana] datasource_uid, or the default one that is). Each reason names
    what is wrong and where (panel title and id, target refId, variable or annotation)."""
    # A text's UTF-8 is at least as long as the text: encoded only when that is shorter.
    if len(content) > MAX_DASHBOARD_BYTES or (
        isinstance(content, str) and len(content.encode("utf-8", "replace")) > MAX_DASHBOARD_BYTES
    ):
        return f"more than {MAX_DASHBOARD_BYTES} bytes, over the cap (2 MiB)"
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError as error:
            return f"not UTF-8 text (byte {error.start})"
    marker = _CONFLICT_MARKER.search(content)
    if marker:
        line = content.count("\n", 0, marker.start()) + 1
        return f"git merge-conflict marker {marker.group(0)[:7]!r} on line {line}"
    too_deep = f"JSON nested more than {MAX_DASHBOARD_DEPTH} levels deep"
    try:
        dashboard = json.loads(content)
    except RecursionError:
        return too_deep
    except ValueError as error:  # JSONDecodeError, and a number too long to convert
        return f"not valid JSON: {str(error)[:200]}"
    if _deeper_than(dashboard, MAX_DASHBOARD_DEPTH):
        return too_deep
    if not isinstance(dashboard, dict):
        return f"not a dashboard: the JSON is a {type(dashboard).__name__}, not an object"
    panels = dashboard.get("panels")
    if not isinstance(panels, list) or not panels:
        return "not a dashboard: no panels"
    if not all(isinstance(panel, dict) for panel in panels):
        return "not a dashboard: a panel is not an object"
    check = _Check(
        known_sglang_metrics() if known is None else known,
        data.monitoring().grafana.datasource_uid if datasource_uid is None else datasource_uid,
    )
    problems = check.dashboard(dashboard)
    if not problems:
        return None
    shown = "; ".join(problems[:_SHOWN_PROBLEMS])
    more = len(problems) - _SHOWN_PROBLEMS
    return shown + (f"; and {more} more" if more > 0 else "")


def _deeper_than(value: Any, cap: int) -> bool:
    """Do ``value``'s arrays and objects nest more than ``cap`` levels (without recursion)?"""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > cap:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _shown(value: Any, width: int = 60) -> str:
    """``value`` as a reason shows it: quoted, control and escape characters escaped (a title
    is the dashboard author's text, printed on the operator's terminal), cut to ``width``."""
    text = value if isinstance(value, str) else json.dumps(value)[:width]
    return repr(text[:width] + ("..." if len(text) > width else ""))


def _panel_where(panel: dict, position: int, parent: str) -> str:
    """``panel 'Title' (id 3)``, after the rows holding it (``row 'R' (id 1) > panel ...``)."""
    title = panel.get("title")
    name = f"panel {_shown(title)}" if isinstance(title, str) and title else "untitled panel"
    ident = panel.get("id")
    if ident is None:
        name += f" (position {position})"
    else:
        plain = isinstance(ident, int) and not isinstance(ident, bool) and abs(ident) < 10**12
        name += f" (id {ident if plain else _shown(ident)})"
    return f"{parent} > {name}" if parent else name


# PromQL, as far as the check reads it: what reaches a metric is a name (a word that is no
# keyword and no function call) or a selector in braces; labels, durations, strings and
# numbers reach none. One pass of this tokenizer, linear in the query's length.
_TOKEN = re.compile(
    r"""(?P<space>\s+|\#[^\n]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
    |(?P<variable>\$\{[^}\s]*\}|\$\w+|\[\[[^\]\s]*\]\])
    |(?P<duration>(?:\d+(?:ms|[smhdwy]))+(?!\w))
    |(?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<word>[a-zA-Z_:][a-zA-Z0-9_:]*)
    |(?P<op>==|!=|<=|>=|=~|!~|[-+*/%^=<>@,(){}\[\]:])""",
    re.VERBOSE,
)
_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum",
    "double_exponential_smoothing", "holt_winters", "hour", "idelta", "increase", "irate",
    "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
    "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan",
    "tanh", "time", "timestamp", "vector", "year", "start", "end",
}  # fmt: skip
# Keywords PromQL reads case-insensitively; after the grouping ones a list of labels follows.
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# Grafana's own variables: durations and numbers, safe wherever PromQL takes one.
_BUILTIN_VARIABLE = re.compile(
    r"^(?:\$\{?__(?:rate_)?interval(?:_ms)?\}?|\$\{?__range(?:_s|_ms)?\}?)$"
)
_NAME_LABEL = "__name__"
# Grafana's Prometheus variable queries (public/app/plugins/datasource/prometheus
# metric_find_query.ts): these read labels or run a query; anything else is a series selector.
_VARIABLE_FUNCTION = re.compile(
    r"^\s*(label_names|label_values|metrics|query_result)\s*\((.*)\)\s*$", re.DOTALL
)
# A variable's value goes into queries as written: one of these could end a string, a
# selector or a range around it and add a query of its own.
_BREAKS_OUT = re.compile(r"[\"'`\\{}\[\]\x00-\x1f]")
_VALUE_VARIABLES = {"custom", "constant", "textbox", "interval", "datasource"}
_GRAFANA_UIDS = {"-- Grafana --", "grafana"}


def promql_reads(expr: str) -> tuple[set[str], list[str]]:
    """(the metric names ``expr`` reads, why else it may reach other metrics): a ``__name__``
    matcher, a selector with no metric name, a Grafana variable where PromQL text goes (not
    a string, not a range), or text this reading cannot follow."""
    names: set[str] = set()
    problems: list[str] = []
    tokens = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            problems.append(f"cannot read the query at {_shown(expr[position : position + 20])}")
            return names, problems
        position = match.end()
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match.group()))
    index = 0
    previous_name = False  # the token before a `{` was a metric name
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "variable" and not _BUILTIN_VARIABLE.match(text):
            problems.append(f"a Grafana variable {_shown(text)} where a metric name can go")
        elif kind == "word":
            lower = text.lower()
            if lower in _GROUPING and following == "(":
                index = _labels_end(tokens, index + 2, problems)
                previous_name = False
                continue
            keyword = lower in _KEYWORDS or lower in _GROUPING or lower in _AGGREGATIONS
            if not keyword and not (text in _FUNCTIONS and following == "("):
                names.add(text)
                previous_name = True
                index += 1
                continue
        elif text == "[":
            index = _range_end(tokens, index + 1, problems)
            previous_name = False
            continue
        elif text == "{":
            index = _selector(tokens, index + 1, previous_name, names, problems)
            previous_name = False
            continue
        previous_name = False
        index += 1
    return names, problems


def _labels_end(tokens: list, index: int, problems: list[str]) -> int:
    """Past the parenthesized labels of by, without, on, ignoring, group_left/right."""
    while index < len(tokens) and tokens[index][1] != ")":
        kind, text = tokens[index]
        if kind not in ("word", "string") and text != ",":
            problems.append(f"{_shown(text)} among a grouping's labels")
        index += 1
    return index + 1


def _range_end(tokens: list, index: int, problems: list[str]) -> int:
    """Past a range or subquery's brackets: durations, numbers and variables only."""
    while index < len(tokens) and tokens[index][1] != "]":
        kind, text = tokens[index]
        if kind not in ("duration", "number", "variable") and text != ":":
            problems.append(f"{_shown(text)} inside a range's brackets")
        index += 1
    return index + 1


def _selector(tokens: list, index: int, named: bool, names: set, problems: list[str]) -> int:
    """Past a selector's braces: each matcher a label (or a quoted one), an operator and a
    string. A quoted name with no operator is the metric's name (Prometheus 3)."""
    while index < len(tokens) and tokens[index][1] != "}":
        kind, text = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        label = text[1:-1] if kind == "string" else text
        if kind in ("word", "string") and following in ("=", "!=", "=~", "!~"):
            if label == _NAME_LABEL:
                problems.append(f"a {_NAME_LABEL} matcher, which reaches any metric")
            value_kind = tokens[index + 2][0] if index + 2 < len(tokens) else ""
            if value_kind != "string":
                problems.append(f"the matcher of {_shown(label)} is not a quoted string")
            index += 3
            continue
        if kind == "string" and following in (",", "}"):
            names.add(label)  # {"name"}: the metric's name, quoted
            named = True
        elif kind == "variable":
            problems.append(f"a Grafana variable {_shown(text)} in a selector's labels")
        elif text != ",":
            problems.append(f"{_shown(text)} inside a selector's braces")
        index += 1
    if not named:
        problems.append("a selector with no metric name, which reaches any metric")
    return index + 1


def variable_query_reads(query: str) -> tuple[set[str], list[str]]:
    """What a templating variable's query reads, as Grafana's Prometheus datasource runs it:
    label_names([selector]), label_values([selector,] label), query_result(query), or a
    series selector; metrics(regex) lists every metric's name and is refused."""
    match = _VARIABLE_FUNCTION.match(query)
    if match is None:
        return promql_reads(query)
    function, inner = match.groups()
    if function == "metrics":
        return set(), ["metrics(), which lists every metric's name"]
    if function == "query_result":
        return promql_reads(inner)
    if function == "label_names":
        return promql_reads(inner) if inner.strip() else (set(), [])
    selector, _, label = inner.rpartition(",")
    names, problems = promql_reads(selector) if selector.strip() else (set(), [])
    return names, problems + _label_problems(label)


def _label_problems(label: str) -> list[str]:
    label = label.strip()
    if label == _NAME_LABEL:
        return [f"label_values of {_NAME_LABEL}, which lists every metric's name"]
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label):
        return [f"the label {_shown(label)} is no label name (a Grafana variable?)"]
    return []


class _Check:
    """One dashboard's walk: every query location, each problem with where it is."""

    def __init__(self, known: set[str], uid: str) -> None:
        self.known = known
        self.uid = uid
        self.problems: list[str] = []
        self.unknown: dict[str, list[str]] = {}  # metric -> where it is read

    def dashboard(self, dashboard: dict) -> list[str]:
        self.panels(dashboard["panels"], "")
        rows = dashboard.get("rows")
        if rows is not None:
            if not isinstance(rows, list):
                self.problems.append(f"the legacy rows are {_shown(rows)}, not a list")
            else:
                for position, row in self._objects(rows, "legacy row", "{what} {position}"):
                    where = f"legacy row {position}"
                    self.datasource(row.get("datasource"), where)
                    self.panels(row.get("panels"), where)
        self.templating(dashboard.get("templating"))
        self.annotations(dashboard.get("annotations"))
        if self.unknown:
            names = sorted(self.unknown)
            places = "; ".join(
                f"{name[:100]} in {', '.join(self.unknown[name][:3])}" for name in names[:10]
            )
            self.problems.insert(
                0,
                f"its queries read {', '.join(n[:100] for n in names[:10])}"
                + (f" and {len(names) - 10} more" if len(names) > 10 else "")
                + ", not among the SGLang metrics checked against the release's /metrics "
                f"(data/monitoring.toml [grafana] sglang_dashboard_metrics): {places}",
            )
        return self.problems

    def panels(self, panels: Any, parent: str) -> None:
        """Each panel of ``panels`` and of the rows nested in it, without recursion."""
        pending = [(panels, parent)]
        while pending:
            listed, parent = pending.pop()
            if listed is None:
                continue
            if not isinstance(listed, list):
                self.problems.append(f"{parent or 'the dashboard'}: its panels are not a list")
                continue
            panel_at = f"{parent + ' > ' if parent else ''}panel"
            for position, panel in self._objects(listed, panel_at):
                where = _panel_where(panel, position, parent)
                if panel.get("libraryPanel") is not None:
                    self.problems.append(
                        f"{where}: a library panel, whose queries are not in the file"
                    )
                self.datasource(panel.get("datasource"), where)
                self.targets(panel.get("targets"), where)
                pending.append((panel.get("panels"), where))

    def targets(self, targets: Any, where: str) -> None:
        if targets is None:
            return
        if not isinstance(targets, list):
            self.problems.append(f"{where}: targets are {_shown(targets)}, not a list")
            return
        for position, target in self._objects(targets, f"{where}: target"):
            ref = target.get("refId")
            at = f"{where}, target {_shown(ref) if ref is not None else position}"
            self.datasource(target.get("datasource"), at)
            for key in ("expr", "query"):
                self.query(target.get(key), f"{at} {key}", promql_reads)

    def query(self, query: Any, where: str, reads) -> None:
        if query is None or query == "":
            return
        if not isinstance(query, str):
            self.problems.append(f"{where} is {_shown(query)}, not a query string")
            return
        names, problems = reads(query)
        self.problems += [f"{where}: {problem}" for problem in problems]
        for name in names:
            if not exposed_family(name, self.known):
                self.unknown.setdefault(name, []).append(where)

    def datasource(self, datasource: Any, where: str, grafana: bool = False) -> None:
        """None (the default datasource: the provisioned Prometheus is), the provisioned
        uid, a Prometheus one without a uid (the default); ``grafana``: Grafana's built-in
        one too (the built-in annotation's)."""
        if datasource is None or datasource == self.uid:
            return
        if isinstance(datasource, dict):
            kind, uid = datasource.get("type"), datasource.get("uid")
            if grafana and kind in (None, "grafana") and uid in _GRAFANA_UIDS:
                return
            if kind in (None, "prometheus") and uid in (None, self.uid):
                return
        self.problems.append(
            f"{where}: datasource {_shown(datasource)}, not the provisioned Prometheus "
            f"(uid {self.uid})"
        )

    def _objects(
        self, items: list, what: str, shape: str = "{what} at position {position}"
    ) -> Iterator[tuple[int, dict]]:
        """(position, item) for each object among ``items``; any other item is a problem,
        "<what> at position N is not an object" (``shape`` words it otherwise)."""
        for position, item in enumerate(items):
            if isinstance(item, dict):
                yield position, item
            else:
                where = shape.format(what=what, position=position)
                self.problems.append(f"{where} is not an object")

    def _section(self, section: Any, name: str) -> list:
        if section is None:
            return []
        listed = section.get("list") if isinstance(section, dict) else None
        if not isinstance(listed, list):
            self.problems.append(f"{name} is {_shown(section)}, not an object with a list")
            return []
        return listed

    def templating(self, templating: Any) -> None:
        listed = self._section(templating, "templating")
        for position, variable in self._objects(listed, "templating variable"):
            name = variable.get("name")
            where = f"templating variable {_shown(name) if name is not None else position}"
            self.datasource(variable.get("datasource"), where)
            kind = variable.get("type")
            query = variable.get("query")
            self._values(variable, where)
            if kind in _VALUE_VARIABLES:
                if query is not None and not isinstance(query, str):
                    self.problems.append(f"{where}: query is {_shown(query)}, not text")
                elif query and _BREAKS_OUT.search(query):
                    self.problems.append(
                        f"{where}: its values {_shown(query)} could end a "
                        "query's string or brackets"
                    )
                continue
            self.query(variable.get("definition"), f"{where} definition", variable_query_reads)
            if isinstance(query, dict):
                self.query(query.get("query"), f"{where} query", variable_query_reads)
                self.query(query.get("metric"), f"{where} metric", promql_reads)
                self.query(query.get("seriesQuery"), f"{where} seriesQuery", promql_reads)
                label = query.get("label")
                if label:
                    problems = _label_problems(label) if isinstance(label, str) else ["not a label"]
                    self.problems += [f"{where} label: {problem}" for problem in problems]
            else:
                self.query(query, f"{where} query", variable_query_reads)

    def _values(self, variable: dict, where: str) -> None:
        """The values saved with a variable (current, options) go into queries as written."""
        current = variable.get("current")
        saved = [current] if isinstance(current, dict) else []
        options = variable.get("options")
        saved += [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []
        for entry in saved:
            for key in ("value", "text"):
                values = entry.get(key)
                for value in values if isinstance(values, list) else [values]:
                    if isinstance(value, str) and _BREAKS_OUT.search(value):
                        self.problems.append(
                            f"{where}: its saved value {_shown(value)} could end a query's "
                            "string or brackets"
                        )
                        return

    def annotations(self, annotations: Any) -> None:
        listed = self._section(annotations, "annotations")
        for position, annotation in self._objects(listed, "annotation"):
            name = annotation.get("name")
            where = f"annotation {_shown(name) if name is not None else position}"
            queries = [(annotation.get(k), f"{where} {k}") for k in ("expr", "query")]
            target = annotation.get("target")
            if isinstance(target, dict):
                queries += [(target.get(k), f"{where} target {k}") for k in ("expr", "query")]
            elif target is not None:
                self.problems.append(f"{where}: target is {_shown(target)}, not an object")
            built_in = bool(annotation.get("builtIn")) and all(q is None for q, _ in queries)
            self.datasource(annotation.get("datasource"), where, grafana=built_in)
            for query, at in queries:
                self.query(query, at, promql_reads)


_GPU_PANELS = (
    ("GPU utilization (%)", "DCGM_FI_DEV_GPU_UTIL", "percent"),
    ("Memory copy utilization (%)", "DCGM_FI_DEV_MEM_COPY_UTIL", "percent"),
    ("Framebuffer used (MiB)", "DCGM_FI_DEV_FB_USED", "mbytes"),
    ("Power draw (W)", "DCGM_FI_DEV_POWER_USAGE", "watt"),
    ("GPU temperature (C)", "DCGM_FI_DEV_GPU_TEMP", "celsius"),
    ("SM clock (MHz)", "DCGM_FI_DEV_SM_CLOCK", "none"),
    ("Last Xid", "DCGM_FI_DEV_XID_ERRORS", "none"),
    ("PCIe replays (per second)", "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[5m])", "none"),
)


def gpu_dashboard() -> dict[str, Any]:
    """A dashboard of the DCGM exporter's default counters, one panel each, a series per
    host and GPU."""
    uid = data.monitoring().grafana.datasource_uid
    panels = []
    for index, (title, query, unit) in enumerate(_GPU_PANELS):
        expr = query if "(" in query else f'{query}{{job="dcgm"}}'
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": uid},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": "A",
                        "expr": expr,
                        "legendFormat": "{{host}} GPU {{gpu}}",
                        "datasource": {"type": "prometheus", "uid": uid},
                    }
                ],
            }
        )
    return {
        "uid": "pyinfra-sglang-gpus",
        "title": "GPUs (DCGM exporter)",
        "tags": ["pyinfra-sglang", "gpu"],
        "schemaVersion": 41,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "panels": panels,
    }


def gpu_dashboard_json() -> str:
    return json.dumps(gpu_dashboard(), indent=2, sort_keys=True) + "\n"
