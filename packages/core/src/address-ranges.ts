/**
 * Addresses and CIDR ranges as OTM_WEBHOOK_ALLOW lists them (config.ts reads it): where webhook
 * deliveries may go although the addresses are private, loopback or link-local (the dispatcher's
 * SSRF rule).
 */
import net from 'node:net';

/** An address range: `address/prefix`; a single address has the full prefix (32 or 128). */
export interface AddressRange {
  readonly address: string;
  readonly prefix: number;
  readonly family: 'ipv4' | 'ipv6';
}

/**
 * A list of addresses and CIDR ranges, comma-separated (`127.0.0.2,10.0.0.0/8,::1,fd00::/8`; an
 * IPv6 address may be in brackets), as node:net's BlockList takes them; throws an Error naming the
 * first bad entry.
 */
export function parseAddressRanges(spec: string): AddressRange[] {
  const out: AddressRange[] = [];
  for (const raw of spec.split(',')) {
    const item = raw.trim();
    if (item === '') continue;
    const slash = item.indexOf('/');
    let address = slash < 0 ? item : item.slice(0, slash);
    if (address.startsWith('[') && address.endsWith(']')) address = address.slice(1, -1);
    const version = net.isIP(address);
    if (version === 0) throw new Error(`'${item}' is not an IP address or a CIDR range (such as 10.0.0.0/8 or fd00::/8)`);
    const max = version === 4 ? 32 : 128;
    const prefixText = slash < 0 ? String(max) : item.slice(slash + 1);
    const prefix = /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
    if (!(prefix >= 0 && prefix <= max)) throw new Error(`'${item}': the prefix length must be 0 to ${max}`);
    const family = version === 4 ? 'ipv4' : 'ipv6';
    // What BlockList itself refuses.
    try {
      new net.BlockList().addSubnet(address, prefix, family);
    } catch (e) {
      throw new Error(`'${item}': ${(e as Error).message}`);
    }
    out.push({ address, prefix, family });
  }
  return out;
}
