export { createEmbeddedService, type EmbeddedService } from './embedded.js';
export { main } from './cli.js';
export { validateText, runValidate, type FileResult } from './validate-cmd.js';
export { keptToken } from './token-file.js';
