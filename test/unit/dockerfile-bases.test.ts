/**
 * The images a Dockerfile starts from, as the worker reads them to hand each
 * to the isolated builder (sandbox/dockerfile-bases.ts).
 */
import { dockerfileBases } from '../../sandbox/dockerfile-bases';

test('every FROM and COPY --from of an image, not a stage; global ARGs and build args substituted', () => {
  const text = [
    '# syntax=docker/dockerfile:1',
    'ARG NODE=22',
    'ARG BASE',
    'FROM --platform=$BUILDPLATFORM node:${NODE} AS build',
    'RUN npm ci',
    'FROM build AS test',
    'FROM ${BASE}',
    'COPY --from=build /app /app',
    'COPY --from=0 /x /x',
    'COPY --from=nginx:1.27 /etc/nginx /etc/nginx',
    'FROM scratch',
  ].join('\n');
  expect(dockerfileBases(text, { BASE: 'debian:trixie-slim' })).toEqual([
    { ref: 'node:22', instruction: 'FROM', line: 4 },
    { ref: 'debian:trixie-slim', instruction: 'FROM', line: 7 },
    { ref: 'nginx:1.27', instruction: 'COPY --from', line: 10 },
  ]);
});

test('a bare \\r and a continuation line break lines as a builder might: a hidden FROM is seen', () => {
  expect(dockerfileBases('FROM a\nRUN echo \rFROM b\n', {})).toEqual([
    { ref: 'a', instruction: 'FROM', line: 1 },
    { ref: 'b', instruction: 'FROM', line: 3 },
  ]);
  expect(dockerfileBases('FROM \\\n  a AS x\nFROM x\n', {})).toEqual([{ ref: 'a', instruction: 'FROM', line: 1 }]);
});

test('an ARG without a value, and a file without FROM, are problems that name the line', () => {
  expect(dockerfileBases('ARG V\nFROM node:$V\n', {})).toEqual({
    problem: 'line 2: node:$V: the ARG V has no value before the first FROM; give it a default',
  });
  expect(dockerfileBases('RUN true\n', {})).toEqual({ problem: 'no FROM instruction' });
  expect(dockerfileBases('ARG V=1\nFROM node:${V:-2}${W:-x}\n', {})).toEqual([
    { ref: 'node:1x', instruction: 'FROM', line: 2 },
  ]);
});
