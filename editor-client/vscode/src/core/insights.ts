/**
 * `RunInfo.insights` as the client shows them (contract section 6.3): the
 * run's status-bar item gets an icon and the short text (the kind) of the
 * insight that matters most, its tooltip and the status report every
 * insight's message. No editor API here, so Node tests cover it.
 */
import type { Insight, RunInfo } from "./protocol";

/** Codicons for the status bar (rendered as icons there). */
const CODICONS: Readonly<Record<string, string>> = { warning: "$(warning)", info: "$(info)" };
/** Plain symbols for text that is not a status-bar item (tooltip, status document). */
const SYMBOLS: Readonly<Record<string, string>> = { warning: "⚠", info: "ℹ" };

/** The run's insights that are well formed, in the server's order; none for a run without the field. */
export function insightsOf(run: RunInfo | null | undefined): Insight[] {
  const listed: unknown = run?.insights;
  if (!Array.isArray(listed)) {
    return [];
  }
  return listed.filter(
    (item: unknown): item is Insight =>
      item !== null && typeof item === "object" && typeof (item as Insight).kind === "string" && (item as Insight).kind !== "",
  );
}

/** The insight the status bar names: the first warning, else the first one (an `info`). */
export function leadingInsight(insights: readonly Insight[]): Insight | undefined {
  return insights.find((insight) => insight.severity === "warning") ?? insights[0];
}

export function hasWarningInsight(run: RunInfo | null | undefined): boolean {
  return insightsOf(run).some((insight) => insight.severity === "warning");
}

/**
 * The status-bar suffix: `$(warning) loss-spike`, `$(warning) loss-spike +2`
 * when more hold, `$(info) edited-during-run` for an information only;
 * undefined when none holds.
 */
export function insightBadge(run: RunInfo | null | undefined): string | undefined {
  const insights = insightsOf(run);
  const lead = leadingInsight(insights);
  if (!lead) {
    return undefined;
  }
  const icon = CODICONS[lead.severity] ?? CODICONS.warning;
  const more = insights.length > 1 ? ` +${insights.length - 1}` : "";
  return `${icon} ${lead.kind}${more}`;
}

/** `20:14:21 UTC` from the ISO time of `since`; the text as it is when it is not one. */
export function sinceText(since: unknown): string | undefined {
  if (typeof since !== "string" || since === "") {
    return undefined;
  }
  const time = /T(\d\d:\d\d:\d\d)/.exec(since);
  return time ? `${time[1]} UTC` : since;
}

/** One line per insight, for the tooltip and the status report: `⚠ loss-spike (since 20:14:21 UTC): what to do`. */
export function insightLines(run: RunInfo | null | undefined): string[] {
  return insightsOf(run).map((insight) => {
    const symbol = SYMBOLS[insight.severity] ?? SYMBOLS.warning;
    const since = sinceText(insight.since);
    const when = since ? ` (since ${since})` : "";
    return `${symbol} ${insight.kind}${when}: ${insight.message}`;
  });
}
