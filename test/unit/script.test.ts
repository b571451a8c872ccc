import { describe, expect, it } from 'vitest';
import { integersOf } from '../../src/redis/scripts/script.js';

describe("integersOf (the decision scripts' replies)", () => {
  it('reads comma-separated decimal integers, negative ones included', () => {
    expect(integersOf('1795572357679,0,1,99,0,1795572417679,0')).toEqual([1795572357679, 0, 1, 99, 0, 1795572417679, 0]);
    expect(integersOf('-5,7')).toEqual([-5, 7]);
    expect(integersOf('999999999999999')).toEqual([999_999_999_999_999]);
  });

  it('refuses anything else rather than read it as a number', () => {
    for (const text of ['', ',', '1,', ',1', '1,,2', '1e+14', '1.5', ' 1', '1 ', '-', '--1', '1-2', '+1', '1234567890123456', 'ERR']) {
      expect(integersOf(text), text).toBeUndefined();
    }
  });
});
