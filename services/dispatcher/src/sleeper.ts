/** A sleep that `wake` ends early; a wake while awake makes the next sleep end at once. */
export class Sleeper {
  private timer: NodeJS.Timeout | undefined;
  private done: (() => void) | undefined;
  private woken = false;

  sleep(ms: number): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.done = () => {
        clearTimeout(this.timer);
        this.timer = undefined;
        this.done = undefined;
        resolve();
      };
      this.timer = setTimeout(this.done, Math.max(0, ms));
    });
  }

  wake(): void {
    if (this.done !== undefined) this.done();
    else this.woken = true;
  }
}
