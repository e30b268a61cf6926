/** The console's review clock (the same file the page loads): visible and in use, with an idle cut-off. */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { createReviewClock } = require('../../workers/console/assets/review-clock.js') as {
  createReviewClock(
    idleMs: number,
    now: number,
    visible: boolean,
  ): { use(t: number): void; visibility(v: boolean, t: number): void; take(t: number): number };
};

const IDLE = 60_000;

test('time counts from the first view while the page is in use', () => {
  const clock = createReviewClock(IDLE, 1_000, true);
  clock.use(20_000);
  expect(clock.take(30_000)).toBe(29_000);
  expect(clock.take(30_000)).toBe(0);
});

test('past the idle cut-off after the last use, time stops; the next use starts it again', () => {
  const clock = createReviewClock(IDLE, 0, true);
  expect(clock.take(10 * 60_000)).toBe(IDLE);
  clock.use(20 * 60_000);
  expect(clock.take(20 * 60_000 + 5_000)).toBe(5_000);
});

test('a hidden page does not count; coming back counts as use', () => {
  const clock = createReviewClock(IDLE, 0, true);
  clock.visibility(false, 10_000);
  clock.use(20_000); // a key in another tab's page does not reach this one, but be safe
  clock.visibility(true, 50_000);
  expect(clock.take(55_000)).toBe(15_000);
});

test('a page opened hidden counts nothing until it is shown', () => {
  const clock = createReviewClock(IDLE, 0, false);
  expect(clock.take(30_000)).toBe(0);
  clock.visibility(true, 30_000);
  expect(clock.take(31_500)).toBe(1_500);
});

test('fractions of a millisecond are kept for the next take', () => {
  const clock = createReviewClock(IDLE, 0, true);
  expect(clock.take(0.6)).toBe(0);
  expect(clock.take(1.2)).toBe(1);
});
