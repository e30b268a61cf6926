/**
 * drydock's dynamic configuration of the Temporal server
 * (infra/compose/dynamicconfig/drydock.yaml), as the dev server gets it:
 * the settings that hold everywhere, not those limited to a namespace.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { serverSettings } from '../../platform/temporal';

describe('serverSettings', () => {
  it('reads the shipped file: eager activities, and the transfer queue read faster than the default 20/s', () => {
    const settings = serverSettings();
    expect(settings['system.enableActivityEagerExecution']).toBe(true);
    expect(settings['history.transferProcessorMaxPollRPS']).toBeGreaterThan(20);
    expect(settings['frontend.enableSchedules']).toBe(true);
  });

  it('leaves out a value limited by constraints (the dev server takes flags for every namespace)', () => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'drydock-settings-')), 'dc.yaml');
    writeFileSync(
      file,
      [
        'a.everywhere:',
        '  - value: 3',
        'b.oneNamespace:',
        '  - value: 4',
        '    constraints: { namespace: x }',
        'c.both:',
        '  - value: 5',
        '    constraints: { namespace: x }',
        '  - value: 6',
      ].join('\n'),
    );
    expect(serverSettings(file)).toEqual({ 'a.everywhere': 3, 'c.both': 6 });
  });
});
