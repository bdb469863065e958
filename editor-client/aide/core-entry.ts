// What AIDE takes from the VS Code extension's editor-agnostic core
// (editor-client/vscode/src/core/): formatting, refusals, progress and resume
// decisions, and which log lines are the trainer's `@arena` announcements
// (hidden unless the person asks for raw lines). `node build-core.mjs` bundles it into lib/core.mjs, a plain ES
// module that AIDE's daemon (Node) and page (a browser) both import; CI runs
// `node build-core.mjs --check` so the committed bundle never drifts from the
// TypeScript it is made of.
export { formatEta, formatLoss, percentDone, blockedList, healthLines, formatLogLine, kindLabel } from "../vscode/src/core/format";
export { Refusal, reasonOf, refusalDetail, stopPrompt, asRpcError } from "../vscode/src/core/refusals";
export { resumeOffer, lastCheckpointOf, startParamsFor } from "../vscode/src/core/resume";
export { runToShow } from "../vscode/src/core/runProgress";
export { isLive, Methods } from "../vscode/src/core/protocol";
export { isAnnouncement } from "../vscode/src/core/announcements";
export { finishedPrompt, mismatchPrompt, oldCheckpointStopPrompt, stopQuestion, fmtSpan, checkpointWords, lostLine, stoppedNotice } from "../vscode/src/core/workLost";
export { TEXTS, say } from "../vscode/src/core/wording";
export { rebootOffer, rebootOffers, commitText, recordLines, interruptedLine } from "../vscode/src/core/laptop";
export { resumedFromLine, skippedLines } from "../vscode/src/core/resumedFrom";
export { keepAwakeText, keepAwakeReason, KEEP_AWAKE_LINE, REASON_LOG_LINES } from "../vscode/src/core/keepAwake";
