/**
 * The review clock: how long a reviewer actually spends on a change. Time
 * counts while the page is visible and in use: from each sign of use (a key,
 * the pointer, a scroll, coming back to the page) up to the idle cut-off
 * after it. Pure (the caller gives the times), so the same file runs in the
 * console's page and in the unit tests (test/unit/review-clock.test.ts).
 */
'use strict';
(function (root) {
  /** A clock that starts at `now` (the first view counts as use) with the page `visible` or not. */
  function createReviewClock(idleMs, now, visible) {
    let lastUse = now;
    let lastTick = now;
    let shown = visible;
    let pending = 0;
    /** Adds the time since the last tick that was visible and within the cut-off. */
    function tick(t) {
      if (t <= lastTick) return;
      if (shown) pending += Math.max(0, Math.min(t, lastUse + idleMs) - lastTick);
      lastTick = t;
    }
    return {
      /** A sign of use at `t`. */
      use(t) {
        tick(t);
        lastUse = Math.max(lastUse, t);
      },
      /** The page became visible (counts as use) or hidden at `t`. */
      visibility(isVisible, t) {
        tick(t);
        shown = isVisible;
        if (isVisible) lastUse = Math.max(lastUse, t);
      },
      /** The time counted and not yet taken, in whole ms; counting goes on from `t`. */
      take(t) {
        tick(t);
        const ms = Math.floor(pending);
        pending -= ms;
        return ms;
      },
    };
  }
  const api = { createReviewClock };
  if (typeof module === 'object' && module.exports) module.exports = api;
  else root.drydockReviewClock = api;
})(this);
