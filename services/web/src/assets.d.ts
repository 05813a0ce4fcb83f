/** An image imported by a page's code: Vite gives its URL in the build (or a data: URL, when small). */
declare module '*.png' {
  const url: string;
  export default url;
}
