import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseAddressRanges } from '@otm/core';
import { TargetRule, embeddedIpv4, signature, urlProblem } from '../src/index.js';

describe('the SSRF rule', () => {
  const strict = new TargetRule();

  it('refuses loopback, private, link-local, unspecified, multicast, CGNAT, reserved and metadata addresses', () => {
    for (const a of [
      '127.0.0.1',
      '127.1.2.3',
      '10.0.0.1',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '169.254.1.1',
      '0.0.0.0',
      '100.64.0.1',
      '100.127.255.255',
      '224.0.0.1',
      '255.255.255.255',
      '::',
      '::1',
      'fc00::1',
      'fd12:3456::1',
      'fd00:ec2::254',
      'fe80::1',
      'ff02::1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '::ffff:10.0.0.1',
      '::ffff:a9fe:a9fe',
      '::10.0.0.1',
      '64:ff9b::10.0.0.1',
      '[::1]',
    ]) {
      expect(strict.refusal(a), a).toBeDefined();
    }
    expect(strict.refusal('169.254.169.254')).toMatch(/metadata/);
    expect(strict.refusal('fd00:ec2::254')).toMatch(/metadata/);
    expect(strict.refusal('::ffff:127.0.0.1')).toMatch(/carries the IPv4 address 127\.0\.0\.1, a loopback address/);
  });

  it('lets public addresses through', () => {
    for (const a of [
      '93.184.216.34',
      '8.8.8.8',
      '172.32.0.1',
      '100.128.0.1',
      '2606:4700::1111',
      '::ffff:93.184.216.34',
      '64:ff9b::8.8.8.8',
    ]) {
      expect(strict.refusal(a), a).toBeUndefined();
    }
  });

  it('lets through what OTM_WEBHOOK_ALLOW lists, addresses and ranges, also in their IPv4-mapped form', () => {
    const rule = new TargetRule(parseAddressRanges('127.0.0.2, 10.0.0.0/8,fd00::/8'));
    expect(rule.refusal('127.0.0.2')).toBeUndefined();
    expect(rule.refusal('127.0.0.1')).toBeDefined();
    expect(rule.refusal('10.200.3.4')).toBeUndefined();
    expect(rule.refusal('::ffff:10.1.1.1')).toBeUndefined();
    expect(rule.refusal('fd00::5')).toBeUndefined();
    expect(rule.refusal('fc00::5')).toBeDefined();
    expect(rule.refusal('169.254.169.254')).toBeDefined();
  });

  it('finds the IPv4 address an IPv6 address carries', () => {
    expect(embeddedIpv4('::ffff:1.2.3.4')).toBe('1.2.3.4');
    expect(embeddedIpv4('::ffff:0102:0304')).toBe('1.2.3.4');
    expect(embeddedIpv4('0:0:0:0:0:ffff:102:304')).toBe('1.2.3.4');
    expect(embeddedIpv4('64:ff9b::1.2.3.4')).toBe('1.2.3.4');
    expect(embeddedIpv4('::1')).toBeUndefined();
    expect(embeddedIpv4('2001:db8::1')).toBeUndefined();
  });

  it('checks URLs: http(s), at most 2048 characters, no credentials, no refused literal host', () => {
    expect(urlProblem('https://hooks.example.com/otm?x=1', strict)).toBeUndefined();
    expect(urlProblem('http://8.8.8.8:8080/x', strict)).toBeUndefined();
    expect(urlProblem('ftp://example.com/', strict)).toMatch(/http or https/);
    expect(urlProblem('file:///etc/passwd', strict)).toMatch(/http or https/);
    expect(urlProblem('https://u:p@example.com/', strict)).toMatch(/credentials/);
    expect(urlProblem('https://u@example.com/', strict)).toMatch(/credentials/);
    expect(urlProblem(`https://example.com/${'x'.repeat(2_048)}`, strict)).toMatch(/2048/);
    expect(urlProblem('/relative', strict)).toMatch(/absolute/);
    // Literal addresses in every spelling the URL parser understands.
    for (const u of [
      'http://127.0.0.1/',
      'http://2130706433/',
      'http://0x7f.1/',
      'http://[::1]/',
      'http://[::ffff:127.0.0.1]/',
      'http://169.254.169.254/',
      'http://0/',
    ]) {
      expect(urlProblem(u, strict), u).toMatch(/OTM_WEBHOOK_ALLOW/);
    }
    // Names are checked at delivery, after they resolve.
    expect(urlProblem('http://localhost:8080/', strict)).toBeUndefined();
  });
});

describe('OTM_WEBHOOK_ALLOW and OTM_WEBHOOK_BATCH', () => {
  it('parses addresses and CIDR ranges, and names the variable when one is bad', () => {
    expect(loadConfig({ OTM_WEBHOOK_ALLOW: '127.0.0.2,10.0.0.0/8, [::1], fd00::/8' }).webhookAllow).toEqual([
      { address: '127.0.0.2', prefix: 32, family: 'ipv4' },
      { address: '10.0.0.0', prefix: 8, family: 'ipv4' },
      { address: '::1', prefix: 128, family: 'ipv6' },
      { address: 'fd00::', prefix: 8, family: 'ipv6' },
    ]);
    expect(loadConfig({}).webhookAllow).toEqual([]);
    for (const bad of ['localhost', '10.0.0.0/33', '10.0.0.0/x', 'fd00::/129', '300.1.1.1']) {
      expect(() => loadConfig({ OTM_WEBHOOK_ALLOW: bad }), bad).toThrow(ConfigError);
      expect(() => loadConfig({ OTM_WEBHOOK_ALLOW: bad }), bad).toThrow(/^OTM_WEBHOOK_ALLOW: /);
    }
    expect(loadConfig({}).webhookBatch).toBe(100);
    expect(loadConfig({ OTM_WEBHOOK_BATCH: '7' }).webhookBatch).toBe(7);
    expect(() => loadConfig({ OTM_WEBHOOK_BATCH: '0' })).toThrow(/OTM_WEBHOOK_BATCH/);
  });
});

describe('the signature', () => {
  it('is t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">', () => {
    const body = Buffer.from('{"deliveryId":"d","subscription":"s","changes":[]}');
    const header = signature('s3cret', body, 1_764_000_000);
    const expected = createHmac('sha256', 's3cret').update(`1764000000.${body.toString()}`).digest('hex');
    expect(header).toBe(`t=1764000000,v1=${expected}`);
  });
});
