export { createEmbeddedService, embeddedAdapterConfig, openEmbeddedAdapters, type EmbeddedService } from './embedded.js';
export { createService, ALL_ROLES, GROUPS, type Roles, type Service } from './service.js';
export { openAdapters, type Adapters, type AdapterOptions } from './adapters.js';
export { main } from './cli.js';
export { validateText, runValidate, type FileResult } from './validate-cmd.js';
export { keptToken } from './token-file.js';
