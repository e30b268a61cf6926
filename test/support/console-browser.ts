/**
 * The console's end-to-end tests in a real Chromium: Debian's, headless, and
 * a person signed in with their token in a context of their own.
 */
import { chromium, type Browser, type Page } from 'playwright-core';

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage', '--disable-gpu'],
  });
}

/** A page of a new context, signed in to serve at `url` with `token`, on the console's first page. */
export async function signedIn(
  browser: Browser,
  url: string,
  token: string,
  viewport?: { width: number; height: number },
): Promise<Page> {
  const page = await browser.newPage(viewport ? { viewport } : {});
  await page.goto(url);
  await page.fill('input[name=token]', token);
  await page.click('button[type=submit]');
  await page.waitForURL(`${url}/`);
  return page;
}
