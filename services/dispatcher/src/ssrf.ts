/**
 * Where webhook deliveries may go (the SSRF guard). A subscription names a URL; the service, not
 * the tenant, makes the connection, from inside the deployment's network: without a rule a tenant
 * could make it POST to the cloud's metadata service, to Redis or to an admin page on loopback. So
 * a delivery is refused when the address it would connect to is
 *
 * - unspecified (0.0.0.0/8, ::), loopback (127.0.0.0/8, ::1), private (10/8, 172.16/12, 192.168/16,
 *   fc00::/7), link-local (169.254/16 with the metadata address 169.254.169.254, fe80::/10),
 *   shared address space (CGNAT, 100.64/10), multicast (224/4, ff00::/8) or reserved (240/4 with
 *   the broadcast address); the IPv6 metadata address fd00:ec2::254 is in fc00::/7;
 * - an IPv6 address that carries one of those IPv4 addresses: IPv4-mapped (::ffff:a.b.c.d),
 *   IPv4-compatible (::a.b.c.d) or NAT64 (64:ff9b::a.b.c.d);
 *
 * unless it is in OTM_WEBHOOK_ALLOW (addresses and CIDR ranges). The rule is checked on the URL at
 * subscription time when its host is an address, and on every connection: on each address a name
 * resolves to (a refused one is never connected to) and again on the address the socket actually
 * connected to, so that a name that resolves to a public address once and a private one later (DNS
 * rebinding) gets nowhere.
 */
import dns from 'node:dns';
import net from 'node:net';
import type { AddressRange } from '@otm/core';

/** The ranges refused unless allowed. */
const FORBIDDEN_V4: ReadonlyArray<[string, number]> = [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
];
const FORBIDDEN_V6: ReadonlyArray<[string, number]> = [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
];

const forbidden = new net.BlockList();
for (const [a, p] of FORBIDDEN_V4) forbidden.addSubnet(a, p, 'ipv4');
for (const [a, p] of FORBIDDEN_V6) forbidden.addSubnet(a, p, 'ipv6');

/** The 16 bytes of an IPv6 address (net.isIPv6 true), or undefined. */
function ipv6Bytes(address: string): number[] | undefined {
  let text = address.split('%')[0]!;
  let tail: number[] = [];
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.', lastColon)) {
    const v4 = text.slice(lastColon + 1);
    if (!net.isIPv4(v4)) return undefined;
    tail = v4.split('.').map(Number);
    text = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const groups = (s: string) => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  const head = groups(halves[0]!);
  const rest = halves.length === 2 ? groups(halves[1]!) : [];
  const fill = halves.length === 2 ? 8 - head.length - rest.length : 0;
  const all = [...head, ...Array<number>(Math.max(0, fill)).fill(0), ...rest];
  if (all.length !== 8 || all.some((g) => !(g >= 0 && g <= 0xffff))) return undefined;
  const bytes = all.flatMap((g) => [g >> 8, g & 0xff]);
  if (tail.length === 4) bytes.splice(12, 4, ...tail);
  return bytes;
}

/** The IPv4 address an IPv6 address carries (mapped, compatible or NAT64), or undefined. */
export function embeddedIpv4(address: string): string | undefined {
  const b = ipv6Bytes(address);
  if (b === undefined) return undefined;
  const zeros = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  const v4 = () => b.slice(12).join('.');
  if (zeros(0, 10) && b[10] === 0xff && b[11] === 0xff) return v4(); // ::ffff:a.b.c.d
  if (zeros(0, 12) && !(b[12] === 0 && b[13] === 0 && b[14] === 0 && b[15]! <= 1)) return v4(); // ::a.b.c.d (not :: or ::1)
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zeros(4, 12)) return v4(); // 64:ff9b::/96
  return undefined;
}

/** Which addresses deliveries may connect to. */
export class TargetRule {
  private readonly allowed = new net.BlockList();
  private readonly anyAllowed: boolean;

  constructor(allow: readonly AddressRange[] = []) {
    for (const r of allow) this.allowed.addSubnet(r.address, r.prefix, r.family);
    this.anyAllowed = allow.length > 0;
  }

  /** Why a connection to this address (an IPv4 or IPv6 literal) is refused; undefined when it may go. */
  refusal(address: string): string | undefined {
    // Brackets of a URL's IPv6 host, and a zone (`fe80::1%eth0`), are not part of the address.
    const bare = (address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address).split('%')[0]!;
    const family = net.isIP(bare);
    if (family === 0) return `'${bare}' is not an IP address`;
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (this.anyAllowed && this.allowed.check(bare, type)) return undefined;
    const inner = family === 6 ? embeddedIpv4(bare) : undefined;
    if (inner !== undefined) {
      if (this.anyAllowed && this.allowed.check(inner, 'ipv4')) return undefined;
      if (forbidden.check(inner, 'ipv4')) return `${bare} carries the IPv4 address ${inner}, ${what(inner)}`;
    }
    if (forbidden.check(bare, type)) return `${bare} is ${what(bare)}`;
    return undefined;
  }

  /**
   * A `lookup` for net.connect that resolves as dns.lookup does and answers only the addresses
   * the rule lets through; when it lets none through, an error that says why (RefusedTarget).
   */
  readonly lookup = (hostname: string, options: dns.LookupOptions, callback: LookupCallback): void => {
    dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 4);
      const ok = addresses.filter((a) => this.refusal(a.address) === undefined);
      if (ok.length === 0) {
        const first = addresses[0];
        const why = first === undefined ? 'no address' : this.refusal(first.address);
        const all = addresses.map((a) => a.address).join(', ');
        return callback(new RefusedTarget(`${hostname} resolves to ${all} (${why})`), '', 4);
      }
      if (options.all === true) return (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, ok);
      callback(null, ok[0]!.address, ok[0]!.family);
    });
  };
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string, family: number) => void;

/** What kind of address a forbidden one is, for messages. */
function what(address: string): string {
  const v4 = net.isIPv4(address);
  const inRange = (a: string, p: number) => {
    const b = new net.BlockList();
    b.addSubnet(a, p, v4 ? 'ipv4' : 'ipv6');
    return b.check(address, v4 ? 'ipv4' : 'ipv6');
  };
  if (v4) {
    if (address === '169.254.169.254') return 'the cloud metadata address';
    if (inRange('0.0.0.0', 8)) return 'an unspecified address';
    if (inRange('127.0.0.0', 8)) return 'a loopback address';
    if (inRange('169.254.0.0', 16)) return 'a link-local address';
    if (inRange('100.64.0.0', 10)) return 'a shared (CGNAT) address';
    if (inRange('224.0.0.0', 4)) return 'a multicast address';
    if (inRange('240.0.0.0', 4)) return 'a reserved address';
    return 'a private address';
  }
  if (inRange('::', 128)) return 'the unspecified address';
  if (inRange('::1', 128)) return 'the loopback address';
  if (inRange('fe80::', 10)) return 'a link-local address';
  if (inRange('ff00::', 8)) return 'a multicast address';
  if (inRange('fd00:ec2::254', 128)) return 'the cloud metadata address';
  return 'a private address';
}

/** A delivery refused by the rule (no connection was made, or the one made was closed at once). */
export class RefusedTarget extends Error {
  readonly code = 'OTM_REFUSED_TARGET';
  constructor(reason: string) {
    super(`refused: ${reason}, which webhooks may not reach unless OTM_WEBHOOK_ALLOW lists it`);
    this.name = 'RefusedTarget';
  }
}

/** Most characters of a subscription's URL. */
export const URL_MAX = 2_048;

/**
 * Why a subscription's URL is not taken (undefined: it is): not http(s), too long, with
 * credentials, without a host, or with a host that is an address the rule refuses.
 */
export function urlProblem(text: string, rule: TargetRule): string | undefined {
  if (text.length > URL_MAX) return `must be at most ${URL_MAX} characters, got ${text.length}`;
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    return 'must be an absolute http or https URL';
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return `must be an http or https URL, got '${u.protocol.slice(0, 20)}'`;
  if (u.username !== '' || u.password !== '')
    return 'must not hold credentials (user:password@): authenticate deliveries by their signature';
  if (u.hostname === '') return 'must name a host';
  const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  if (net.isIP(host) !== 0) {
    const refusal = rule.refusal(host);
    if (refusal !== undefined) return `${refusal}, which webhooks may not reach unless OTM_WEBHOOK_ALLOW lists it`;
  }
  return undefined;
}
