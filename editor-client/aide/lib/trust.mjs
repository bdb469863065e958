// Who may drive the Training Room (docs/security.md, "The AIDE daemon"):
// loopback is not enough, since every local account and every web page the
// person opens can reach 127.0.0.1. Two checks on top of the origin and Host:
//
// - the page's secret: a per-daemon random token that the owner's page gets
//   with its HTML (served same-origin only, so another origin cannot read it)
//   and sends in the `X-Arena-Token` header; compared in constant time.
// - the peer's account, where the OS tells: on Linux the uid that owns the
//   client's end of a loopback TCP connection (/proc/net/tcp and tcp6); a
//   connection from another user is refused outright.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { mkdir, open, readFile, rm } from "node:fs/promises";
import path from "node:path";

/** The header the page sends its secret in (a custom header: a cross-origin request must pass a preflight). */
export const TOKEN_HEADER = "x-arena-token";

/** A fresh 256-bit secret, URL-safe (an EventSource carries it in the query string). */
export function newToken() {
  return randomBytes(32).toString("base64url");
}

function digest(text) {
  return createHash("sha256").update(String(text), "utf8").digest();
}

/** Constant-time: equal-length digests, so neither the length nor a prefix of the secret leaks. */
export function tokenMatches(given, expected) {
  if (typeof given !== "string" || given === "" || typeof expected !== "string" || expected === "") {
    return false;
  }
  return timingSafeEqual(digest(given), digest(expected));
}

/**
 * Writes the secret for the owner's scripts (verify-gates.sh): mode 0600, never
 * through a link or onto a file another process prepared (the old file is
 * removed, the new one created exclusively, without following links).
 */
export async function writeTokenFile(file, token) {
  await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  await rm(file, { force: true });
  const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | (fsConstants.O_NOFOLLOW ?? 0);
  const handle = await open(file, flags, 0o600);
  try {
    await handle.writeFile(`${token}\n`, "utf8");
  } finally {
    await handle.close();
  }
}

/** Removes the token file if it still holds this daemon's secret (a newer daemon's is left alone). */
export async function removeTokenFile(file, token) {
  try {
    if ((await readFile(file, "utf8")).trim() === token) {
      await rm(file, { force: true });
    }
  } catch {
    // gone already
  }
}

// -- the peer's account (Linux) -----------------------------------------------------------

/** 16 bytes of an IPv4 or IPv6 text address (IPv4 as ::ffff:a.b.c.d); null when it is neither. */
export function addressBytes(text) {
  const plain = String(text ?? "").replace(/%.*$/, "");
  const v4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(plain);
  if (v4) {
    const bytes = Buffer.alloc(16);
    bytes[10] = 0xff;
    bytes[11] = 0xff;
    for (let index = 0; index < 4; index += 1) {
      bytes[12 + index] = Number(v4[index + 1]);
    }
    return bytes;
  }
  if (!plain.includes(":")) {
    return null;
  }
  let text6 = plain;
  let tail = [];
  const dotted = /:(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})$/.exec(text6);
  if (dotted) {
    const four = addressBytes(dotted[1]);
    tail = [four.readUInt16BE(12).toString(16), four.readUInt16BE(14).toString(16)];
    text6 = text6.slice(0, dotted.index + 1) + tail.join(":");
  }
  const halves = text6.split("::");
  if (halves.length > 2) {
    return null;
  }
  const head = halves[0] === "" ? [] : halves[0].split(":");
  const rest = halves.length === 2 && halves[1] !== "" ? halves[1].split(":") : [];
  const missing = 8 - head.length - rest.length;
  if ((halves.length === 1 && missing !== 0) || missing < 0) {
    return null;
  }
  const groups = [...head, ...Array(halves.length === 2 ? missing : 0).fill("0"), ...rest];
  const bytes = Buffer.alloc(16);
  for (const [index, group] of groups.entries()) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(group)) {
      return null;
    }
    bytes.writeUInt16BE(parseInt(group, 16), index * 2);
  }
  return bytes;
}

/** An address as /proc/net/tcp{,6} writes it (32-bit words in host order, little-endian here) → 16 bytes. */
export function procAddressBytes(hex) {
  const words = hex.length === 8 ? [hex] : hex.length === 32 ? hex.match(/.{8}/g) : null;
  if (!words) {
    return null;
  }
  const raw = Buffer.concat(words.map((word) => Buffer.from(word, "hex").reverse()));
  if (raw.length === 4) {
    return addressBytes([...raw].join("."));
  }
  return raw;
}

/**
 * The uid owning the socket whose local end is (address, port) and remote end
 * (peerAddress, peerPort), from the text of /proc/net/tcp or tcp6; undefined
 * when no line names it.
 */
export function uidInProcTable(table, { address, port, peerAddress, peerPort }) {
  const wanted = addressBytes(address);
  const wantedPeer = addressBytes(peerAddress);
  if (!wanted || !wantedPeer) {
    return undefined;
  }
  const needle = `:${port.toString(16).toUpperCase().padStart(4, "0")} `;
  for (const line of table.split("\n")) {
    if (!line.includes(needle)) {
      continue;
    }
    const fields = line.trim().split(/\s+/);
    if (fields.length < 8) {
      continue;
    }
    const [localHex, localPort] = fields[1].split(":");
    const [remoteHex, remotePort] = fields[2].split(":");
    if (parseInt(localPort, 16) !== port || parseInt(remotePort, 16) !== peerPort) {
      continue;
    }
    const local = procAddressBytes(localHex);
    const remote = procAddressBytes(remoteHex);
    if (local && remote && local.equals(wanted) && remote.equals(wantedPeer)) {
      return Number(fields[7]);
    }
  }
  return undefined;
}

/**
 * The uid of the process at the other end of an accepted loopback socket: the
 * owner of the client's end (local = our remote, remote = our local).
 * `null` where the OS does not tell (not Linux, /proc unreadable); `undefined`
 * when Linux was asked and no socket matched (the client is gone).
 */
export async function peerUid(socket, { platform = process.platform, read = (file) => readFile(file, "latin1") } = {}) {
  if (platform !== "linux") {
    return null;
  }
  const key = {
    address: socket.remoteAddress,
    port: socket.remotePort,
    peerAddress: socket.localAddress,
    peerPort: socket.localPort,
  };
  let readable = false;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let table;
    try {
      table = await read(file);
    } catch {
      continue;
    }
    readable = true;
    const uid = uidInProcTable(table, key);
    if (uid !== undefined) {
      return uid;
    }
  }
  return readable ? undefined : null;
}

const VERDICT = Symbol("arena.peerVerdict");

/**
 * Whether the peer of this connection is the daemon's own account: true,
 * false, or null where the OS cannot tell. Asked once per connection (a
 * keep-alive connection keeps its verdict).
 */
export function peerIsOwner(socket, { ownUid = process.getuid?.(), lookup = peerUid } = {}) {
  if (ownUid === undefined) {
    return Promise.resolve(null);
  }
  if (!socket[VERDICT]) {
    socket[VERDICT] = lookup(socket).then(
      (uid) => (uid === null ? null : uid === ownUid),
      () => false,
    );
  }
  return socket[VERDICT];
}
